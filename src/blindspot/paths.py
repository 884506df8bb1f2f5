"""Where the checkout's own files are: the one place that finds the checkout from the package."""

from __future__ import annotations

from pathlib import Path

# src/blindspot/paths.py -> the checkout (blindspot runs from its checkout: an editable install).
CHECKOUT = Path(__file__).resolve().parents[2]
SOURCE_DIR = CHECKOUT / "src"  # what a rule's env puts on its path to import this checkout's blindspot
SNAKEFILE = CHECKOUT / "workflow" / "Snakefile"
SCHEMA_DIR = CHECKOUT / "workflow" / "schemas"
ENV_DIR = CHECKOUT / "workflow" / "envs"  # one conda env file per kind of rule
PROMPTS_DIR = CHECKOUT / "config" / "prompts"
PROFILES_DIR = CHECKOUT / "profiles"
DOCS_DIR = CHECKOUT / "docs"
