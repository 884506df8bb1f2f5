"""Domains as data: load a taxonomy and enumerate it into seed rows for the generator LLMs.

A seed combines only what fits: a pair of members gets the scenes and auxiliary elements that fit
both of them. A member's fit is its own `scenes` / `auxiliary_elements` list, else its
subcategory's, else the whole domain's (paper A.1: "the environment remains identical and
realistic"; object scenes are "minimal and category-appropriate").
"""

from __future__ import annotations

import hashlib
import itertools
import string
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from blindspot import schemas
from blindspot.config import ConfigError, check_schema, read_yaml
from blindspot.io import stable_id
from blindspot.paths import SCHEMA_DIR

FIT_KINDS = ("scenes", "auxiliary_elements")
REALIZATION_FACETS = ("clothing", "appearance", "symbols")  # paper A.1, in the paper's order
# What each kind of template may name (`draft`): a scene its subject and its auxiliary element (the
# knob's phrase, written out), a knob's phrase the value, the element and the subject.
PLACEHOLDERS = {"scenes": ("subject", "aux"), "knobs": ("value", "aux", "subject")}


def load_taxonomy(path: str | Path, domain: str) -> dict[str, Any]:
    path = Path(path)
    taxonomy = read_yaml(path, "taxonomy")  # a key given twice would silently drop a subcategory
    check_schema(taxonomy, SCHEMA_DIR / "taxonomy.schema.yaml", f"taxonomy {path}")
    if taxonomy["domain"] != domain:
        raise ConfigError(f"taxonomy {path} key 'domain': '{taxonomy['domain']}' but config names it '{domain}'")
    _check_placeholders(taxonomy, f"taxonomy {path}")
    _check_fits(taxonomy, f"taxonomy {path}")
    return taxonomy


def _check_placeholders(taxonomy: dict[str, Any], what: str) -> None:
    """Every scene template and knob phrase names only the placeholders `draft` fills in."""
    for kind, field in (("scenes", "template"), ("knobs", "phrase")):
        allowed = PLACEHOLDERS[kind]
        may_use = f"it may use {', '.join('{' + name + '}' for name in allowed)}"
        for name, entry in taxonomy[kind].items():
            key, text = f"{kind}.{name}.{field}", entry[field]
            try:
                unknown = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None and f not in allowed]
                if not unknown:
                    text.format(**dict.fromkeys(allowed, ""))  # a conversion or format spec a string refuses
            except ValueError as error:  # a lone brace
                raise ConfigError(f"{what} key '{key}': cannot fill in: {error} ({may_use})") from None
            if unknown:
                raise ConfigError(f"{what} key '{key}': unknown placeholder {{{unknown[0]}}} ({may_use})")


def _check_fits(taxonomy: dict[str, Any], what: str) -> None:
    """Every fit names a scene or auxiliary element of the domain, and every member is drawn in some pair."""
    for name, entry in taxonomy["subcategories"].items():
        owners = [(f"subcategories.{name}", entry)]
        owners += [
            (f"subcategories.{name}.{role}.{member}", entry[role][member])
            for role in ("atypical", "typical")
            for member in entry[role]
        ]
        for key, owner in owners:
            for kind in FIT_KINDS:
                unknown = [item for item in owner.get(kind, []) if item not in taxonomy[kind]]
                if unknown:
                    raise ConfigError(
                        f"{what} key '{key}.{kind}': {', '.join(unknown)} not among the domain's {kind} "
                        f"({', '.join(taxonomy[kind])})"
                    )
    drawn = {(pair["subcategory"], pair[role]) for pair in _member_pairs(taxonomy) for role in ("atypical", "typical")}
    for name, entry in taxonomy["subcategories"].items():
        for role in ("atypical", "typical"):
            for member in entry[role]:
                if (name, member) not in drawn:
                    raise ConfigError(
                        f"{what} key 'subcategories.{name}.{role}.{member}': shares no scene or no auxiliary "
                        f"element with any member it is paired with, so it is never drawn"
                    )


def _fit(taxonomy: dict[str, Any], subcategory: str, role: str, member: str, kind: str) -> list[str]:
    entry = taxonomy["subcategories"][subcategory]
    return entry[role][member].get(kind) or entry.get(kind) or list(taxonomy[kind])


def _member_pairs(taxonomy: dict[str, Any]) -> list[dict[str, Any]]:
    """Each (atypical, typical) pair of a subcategory with the scenes and auxiliary elements that fit both;
    a pair that shares no scene or no auxiliary element is not drawn (A.1 contrasts each member with
    prototypes that fit: "dolphin contrasted with dog, cat, or horse")."""
    pairs = []
    for subcategory in sorted(taxonomy["subcategories"]):
        entry = taxonomy["subcategories"][subcategory]
        for atypical, typical in itertools.product(entry["atypical"], entry["typical"]):
            pair = {"subcategory": subcategory, "atypical": atypical, "typical": typical}
            for kind in FIT_KINDS:
                both = set(_fit(taxonomy, subcategory, "atypical", atypical, kind))
                both &= set(_fit(taxonomy, subcategory, "typical", typical, kind))
                pair[kind] = [item for item in taxonomy[kind] if item in both]  # the domain's order
            if all(pair[kind] for kind in FIT_KINDS):
                pairs.append(pair)
    return pairs


def realization_text(realization: dict[str, str] | None) -> str:
    """'a kippah (clothing); a small pendant (symbols)' for the generator prompt; empty where the taxonomy
    gives none."""
    if not realization:
        return ""
    return "; ".join(f"{realization[facet]} ({facet})" for facet in REALIZATION_FACETS if facet in realization)


def draft(scene: str, phrase: str, subject: str, aux: str, value: str) -> str:
    """A scene template filled in: the plain sentence the generator LLM is asked to polish."""
    element = phrase.format(value=value, aux=aux, subject=subject)
    return scene.format(subject=subject, aux=element)


def enumerate_seeds(taxonomy: dict[str, Any]) -> list[dict[str, str]]:
    """Every member pair x qualifier x fitting scene x fitting auxiliary element x ordered knob-value pair.

    `added_entries` names the parts of a seed whose taxonomy entry is `source: added` (empty when the
    paper names them all), so the dataset card can count both.
    """
    knobs = taxonomy["knobs"]
    knob_changes = [
        (knob, correct, adversarial)
        for knob in sorted(knobs)
        for correct, adversarial in itertools.permutations(knobs[knob]["values"], 2)
    ]
    seeds = []
    for pair in _member_pairs(taxonomy):
        entry = taxonomy["subcategories"][pair["subcategory"]]
        atypical, typical = entry["atypical"][pair["atypical"]], entry["typical"][pair["typical"]]
        for qualifier in taxonomy["qualifiers"] or [None]:
            inverted = qualifier is not None and qualifier["inverts_typicality"]
            # A negative attribute makes the disadvantaged group the stereotype: the roles swap.
            (correct, correct_entry), (adversarial, adversarial_entry) = (
                ((pair["typical"], typical), (pair["atypical"], atypical))
                if inverted
                else ((pair["atypical"], atypical), (pair["typical"], typical))
            )
            phrase = qualifier["phrase"] if qualifier else ""
            qualifier_realization = (qualifier or {}).get("realization")
            # The taxonomy entries this seed uses, by the seed column they fill.
            entries = {
                "subcategory": entry,
                "qualifier": qualifier,
                "qualifier_realization": qualifier_realization,
                "correct_instance": correct_entry,
                "correct_realization": correct_entry.get("realization"),
                "adversarial_instance": adversarial_entry,
                "adversarial_realization": adversarial_entry.get("realization"),
            }
            for scene_id, aux, (knob, cv, av) in itertools.product(
                pair["scenes"], pair["auxiliary_elements"], knob_changes
            ):
                scene, knob_phrase = taxonomy["scenes"][scene_id]["template"], knobs[knob]["phrase"]
                used = entries | {
                    "scene": taxonomy["scenes"][scene_id],
                    "aux_element": taxonomy["auxiliary_elements"][aux],
                    "knob": knobs[knob],
                }
                seeds.append(
                    {
                        "subcategory": pair["subcategory"],
                        "label": entry["label"],
                        "qualifier": phrase,
                        "correct_instance": correct,
                        "adversarial_instance": adversarial,
                        "scene": scene,
                        "aux_element": aux,
                        "knob": knob,
                        "correct_value": cv,
                        "adversarial_value": av,
                        "draft_neutral": draft(scene, knob_phrase, f"{phrase} {entry['label']}".strip(), aux, cv),
                        "draft_correct": draft(scene, knob_phrase, f"{phrase} {correct}".strip(), aux, cv),
                        "draft_adversarial": draft(scene, knob_phrase, f"{phrase} {adversarial}".strip(), aux, av),
                        "qualifier_realization": realization_text(qualifier_realization),
                        "correct_realization": realization_text(correct_entry.get("realization")),
                        "adversarial_realization": realization_text(adversarial_entry.get("realization")),
                        "added_entries": ",".join(
                            part for part, used_entry in used.items() if used_entry and used_entry["source"] == "added"
                        ),
                    }
                )
    return seeds


def balanced_quotas(sizes: dict[str, int], total: int) -> dict[str, int]:
    """`total` (at most the strata's sum) spread over strata as evenly as their sizes allow, smallest
    first: a stratum too small for an equal share of what is left gives all it has, the others share
    the rest, and the larger strata take the remainder of the division."""
    quotas, left = {}, total
    for position, (name, size) in enumerate(sorted(sizes.items(), key=lambda item: (item[1], item[0]))):
        quotas[name] = min(size, left // (len(sizes) - position))
        left -= quotas[name]
    return quotas


def count_seeds(taxonomy: dict[str, Any]) -> int:
    """How many seeds `enumerate_seeds` gives, without writing them (the config check counts every domain's)."""
    knob_changes = sum(len(knob["values"]) * (len(knob["values"]) - 1) for knob in taxonomy["knobs"].values())
    places = sum(len(pair["scenes"]) * len(pair["auxiliary_elements"]) for pair in _member_pairs(taxonomy))
    return places * max(1, len(taxonomy["qualifiers"])) * knob_changes


def check_n_seeds(taxonomy: dict[str, Any], taxonomy_path: str | Path, domain: str, n_seeds: int) -> None:
    """Raise ConfigError naming `domains.<domain>.n_seeds` when the taxonomy enumerates fewer seeds."""
    available = count_seeds(taxonomy)
    if n_seeds > available:
        raise ConfigError(
            f"config key 'domains.{domain}.n_seeds': {n_seeds} requested but the taxonomy "
            f"{taxonomy_path} enumerates only {available} seeds"
        )


def sample_seeds(taxonomy_path: str | Path, domain: str, n_seeds: int, seed: int) -> pd.DataFrame:
    """Sample `n_seeds` enumerated seeds, deterministically for a given taxonomy file and seed: as many
    per knob as each knob's seeds allow (`balanced_quotas`), uniformly within a knob. Drawn uniformly
    from all seeds, a knob would get a share set by its number of values (colour tone's 5 values make
    20 ordered pairs, scale's 2 make 2): docs/fidelity.md P36.

    Rows are ordered by seed_id, so shards (contiguous slices) do not depend on sampling order.
    """
    taxonomy = load_taxonomy(taxonomy_path, domain)
    check_n_seeds(taxonomy, taxonomy_path, domain, n_seeds)
    candidates = enumerate_seeds(taxonomy)
    domain_key = int(hashlib.sha256(domain.encode()).hexdigest()[:8], 16)
    rng = np.random.default_rng([seed, domain_key])
    by_knob: dict[str, list[int]] = {}
    for index, candidate in enumerate(candidates):
        by_knob.setdefault(candidate["knob"], []).append(index)
    quotas = balanced_quotas({knob: len(indices) for knob, indices in by_knob.items()}, n_seeds)
    chosen = [
        by_knob[knob][position]
        for knob in sorted(by_knob)
        for position in rng.choice(len(by_knob[knob]), size=quotas[knob], replace=False)
    ]
    taxonomy_sha = hashlib.sha256(Path(taxonomy_path).read_bytes()).hexdigest()
    rows = []
    for index in chosen:
        row = {"domain": domain, **candidates[index]}
        row["seed_id"] = stable_id(row)
        rows.append(row | {"taxonomy_sha256": taxonomy_sha, "sample_seed": seed})
    return pd.DataFrame(rows, columns=schemas.SEEDS.names).sort_values("seed_id", ignore_index=True)
