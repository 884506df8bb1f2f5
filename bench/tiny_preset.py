"""The tiny preset for the benchmarks, its models built into a folder (as tests/conftest.py's `built_config`)."""

from pathlib import Path

import yaml

from blindspot.models.spec import resolved_recipe
from blindspot.tiny.build import build_model

REPO = Path(__file__).resolve().parents[1]


def tiny_config(resources: str | Path) -> dict:
    """config/tiny.yaml with its models in `resources`, and build archives found from any working directory."""
    config = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    config["resources_dir"] = str(resources)
    for entry in config["models"].values():
        if "archive" in entry.get("build", {}):
            entry["build"]["archive"] = str(REPO / entry["build"]["archive"])
    return config


def build_models(config: dict, names: set[str]) -> None:
    """Build the named models, and those they take a tokenizer from, the lenders first; a model already
    built in the resources folder is kept."""
    needed = set(names)
    while lenders := {config["models"][n]["build"].get("tokenizer_from") for n in needed} - needed - {None}:
        needed |= lenders
    for name in sorted(needed, key=lambda n: "tokenizer_from" in config["models"][n]["build"]):
        out = Path(config["resources_dir"]) / "models" / name
        if not out.exists():
            build_model(out, resolved_recipe(config, name), config["seed"])
