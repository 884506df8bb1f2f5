"""Domains as data: load a taxonomy and enumerate it into seed rows for the generator LLMs."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from blindspot.config import SCHEMA_DIR, ConfigError, check_schema
from blindspot.io import stable_id

SEED_COLUMNS = [
    "seed_id", "domain", "subcategory", "label", "qualifier", "correct_instance", "adversarial_instance",
    "scene", "aux_element", "knob", "correct_value", "adversarial_value",
    "draft_neutral", "draft_correct", "draft_adversarial", "taxonomy_sha256", "sample_seed",
]  # fmt: skip


def load_taxonomy(path: str | Path, domain: str) -> dict[str, Any]:
    path = Path(path)
    taxonomy = yaml.safe_load(path.read_text())
    check_schema(taxonomy, SCHEMA_DIR / "taxonomy.schema.yaml", f"taxonomy {path}")
    if taxonomy["domain"] != domain:
        raise ConfigError(f"taxonomy {path} key 'domain': '{taxonomy['domain']}' but config names it '{domain}'")
    return taxonomy


def _instance_pairs(taxonomy: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(subcategory, qualifier, correct instance, adversarial instance) for every taxonomy entry."""
    qualifiers = taxonomy["qualifiers"] or [None]
    pairs = []
    for subcategory in sorted(taxonomy["subcategories"]):
        entry = taxonomy["subcategories"][subcategory]
        for atypical, typical, qualifier in itertools.product(entry["atypical"], entry["typical"], qualifiers):
            inverted = qualifier is not None and qualifier["inverts_typicality"]
            correct, adversarial = (typical, atypical) if inverted else (atypical, typical)
            pairs.append((subcategory, qualifier["phrase"] if qualifier else "", correct, adversarial))
    return pairs


def draft(scene: str, phrase: str, subject: str, aux: str, value: str) -> str:
    """A scene template filled in: the plain sentence the generator LLM is asked to polish."""
    element = phrase.format(value=value, aux=aux, subject=subject)
    return scene.format(subject=subject, aux=element)


def enumerate_seeds(taxonomy: dict[str, Any]) -> list[dict[str, str]]:
    """Every taxonomy entry x scene template x auxiliary element x ordered knob-value pair."""
    knobs = taxonomy["knobs"]
    knob_changes = [
        (knob, correct, adversarial)
        for knob in sorted(knobs)
        for correct, adversarial in itertools.permutations(knobs[knob]["values"], 2)
    ]
    seeds = []
    for (subcategory, qualifier, correct, adversarial), scene, aux, (knob, cv, av) in itertools.product(
        _instance_pairs(taxonomy), taxonomy["scenes"], taxonomy["auxiliary_elements"], knob_changes
    ):
        label = taxonomy["subcategories"][subcategory]["label"]
        phrase = knobs[knob]["phrase"]
        seeds.append(
            {
                "subcategory": subcategory,
                "label": label,
                "qualifier": qualifier,
                "correct_instance": correct,
                "adversarial_instance": adversarial,
                "scene": scene,
                "aux_element": aux,
                "knob": knob,
                "correct_value": cv,
                "adversarial_value": av,
                "draft_neutral": draft(scene, phrase, f"{qualifier} {label}".strip(), aux, cv),
                "draft_correct": draft(scene, phrase, f"{qualifier} {correct}".strip(), aux, cv),
                "draft_adversarial": draft(scene, phrase, f"{qualifier} {adversarial}".strip(), aux, av),
            }
        )
    return seeds


def sample_seeds(taxonomy_path: str | Path, domain: str, n_seeds: int, seed: int) -> pd.DataFrame:
    """Sample `n_seeds` enumerated seeds, deterministically for a given taxonomy file and seed.

    Rows are ordered by seed_id, so shards (contiguous slices) do not depend on sampling order.
    """
    taxonomy = load_taxonomy(taxonomy_path, domain)
    candidates = enumerate_seeds(taxonomy)
    if n_seeds > len(candidates):
        raise ConfigError(
            f"config key 'domains.{domain}.n_seeds': {n_seeds} requested but the taxonomy "
            f"{taxonomy_path} enumerates only {len(candidates)} seeds"
        )
    domain_key = int(hashlib.sha256(domain.encode()).hexdigest()[:8], 16)
    rng = np.random.default_rng([seed, domain_key])
    chosen = rng.choice(len(candidates), size=n_seeds, replace=False)
    taxonomy_sha = hashlib.sha256(Path(taxonomy_path).read_bytes()).hexdigest()
    rows = []
    for index in chosen:
        row = {"domain": domain, **candidates[index]}
        row["seed_id"] = stable_id(row)
        rows.append(row | {"taxonomy_sha256": taxonomy_sha, "sample_seed": seed})
    return pd.DataFrame(rows, columns=SEED_COLUMNS).sort_values("seed_id", ignore_index=True)
