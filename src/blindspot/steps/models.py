"""The model stage (`workflow/rules/models.smk`): models built locally from a recipe."""

from __future__ import annotations

from typing import Any


def build_model(recipe: dict[str, Any], seed: int | None, out: str) -> None:
    """Build a model from its recipe: a tiny real architecture (random weights from `seed`) or weights
    shipped in a package (no seed)."""
    from blindspot.tiny.build import build_model as build

    build(out, recipe, seed)
