"""Train/test split at the seed level, and the two disjoint human-annotation subsets of the paper.

The paper splits "at the prompt-triplet level, ensuring that variants of the same underlying triplet do not
appear across splits" (section 5). A seed (one taxonomy draw: pair, scene, element, knob) yields one triplet per
generator LLM, near-copies of each other, so the unit of the split is the seed: every triplet of a seed and every
image of each fall in one split (docs/fidelity.md P19)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from blindspot.io import stable_id


def split_of(seed_id: str, seed: int, test_fraction: float) -> str:
    """A seed's split from a hash of its id: stable when seeds are added or removed."""
    draw = int(stable_id(seed_id, seed)[:12], 16) / 16**12
    return "test" if draw < test_fraction else "train"


def assign_splits(pairs: pd.DataFrame, seed: int, test_fraction: float) -> pd.DataFrame:
    """Kept pairs with their split; all pairs of a seed share it, so no seed (and no triplet) is in both."""
    splits = {s: split_of(s, seed, test_fraction) for s in pairs["seed_id"].unique()}
    return pairs.assign(split=pairs["seed_id"].map(splits))


def kept_with_splits(
    pairs: pd.DataFrame, triplets: pd.DataFrame, seed: int, test_fraction: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every pair with its triplet's fields, the kept ones with their split)."""
    merged = pairs.merge(triplets, on="triplet_id", how="left", validate="many_to_one")
    return merged, assign_splits(merged[merged["kept"]], seed, test_fraction)


def image_decisions(pairs: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """One row per image: its own description's scores from every VLM and the accept decision."""
    rows = []
    for pair in pairs.itertuples(index=False):
        scores = json.loads(pair.vlm_scores)
        for role in ("corr", "adv"):
            per_vlm = {vlm: value[role] for vlm, value in scores.items()}
            rows.append(
                {
                    "image_id": getattr(pair, f"{role}_image_id"),
                    "path": getattr(pair, f"{role}_path"),
                    "pair_id": pair.pair_id,
                    "triplet_id": pair.triplet_id,
                    "domain": pair.domain,
                    "t2i": pair.t2i,
                    "role": role,
                    "vlm_scores": json.dumps(per_vlm, sort_keys=True),
                    "mean_vlm_score": float(np.mean(list(per_vlm.values()))),
                    "accepted": all(value >= threshold for value in per_vlm.values()),
                }
            )
    return pd.DataFrame(rows)


def _take(frame: pd.DataFrame, n: int, rng: np.random.Generator) -> pd.DataFrame:
    if len(frame) <= n:
        return frame
    return frame.iloc[np.sort(rng.choice(len(frame), size=n, replace=False))]


def filter_validation_subset(images: pd.DataFrame, n_images: int, seed: int) -> tuple[pd.DataFrame, dict[str, Any]]:
    """`n_images` images balanced over domains and over accept/reject (paper, Appendix D).

    Where a cell has too few images, all of it is taken and the shortfall is counted.
    """
    rng = np.random.default_rng(seed)
    domains = sorted(images["domain"].unique())
    per_cell = n_images // (2 * max(1, len(domains)))
    chosen, shortfall = [], {}
    for domain in domains:
        for accepted in (True, False):
            cell = images[(images["domain"] == domain) & (images["accepted"] == accepted)].sort_values("image_id")
            taken = _take(cell, per_cell, rng)
            chosen.append(taken)
            if len(taken) < per_cell:
                shortfall[f"{domain}/{'accept' if accepted else 'reject'}"] = per_cell - len(taken)
    subset = pd.concat(chosen, ignore_index=True) if chosen else images.iloc[:0]
    return subset, {"requested": n_images, "selected": len(subset), "shortfall": shortfall}


def preference_subset(
    test_pairs: pd.DataFrame, domains: list[str], per_domain: int, excluded_images: set[str], seed: int
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """`per_domain` test pairs per domain for pairwise preference, sharing no image with
    `excluded_images`, each with its left/right order drawn at random and recorded."""
    rng = np.random.default_rng(seed)
    free = test_pairs[
        ~test_pairs["corr_image_id"].isin(excluded_images) & ~test_pairs["adv_image_id"].isin(excluded_images)
    ]
    chosen, shortfall = [], {}
    for domain in sorted(domains):
        taken = _take(free[free["domain"] == domain].sort_values("pair_id"), per_domain, rng)
        chosen.append(taken)
        if len(taken) < per_domain:
            shortfall[domain] = per_domain - len(taken)
    subset = pd.concat(chosen, ignore_index=True) if chosen else test_pairs.iloc[:0]
    left_is_corr = rng.random(len(subset)) < 0.5
    subset = subset.assign(
        left_role=np.where(left_is_corr, "corr", "adv"),
        left_image_id=np.where(left_is_corr, subset["corr_image_id"], subset["adv_image_id"]),
        right_image_id=np.where(left_is_corr, subset["adv_image_id"], subset["corr_image_id"]),
        left_path=np.where(left_is_corr, subset["corr_path"], subset["adv_path"]),
        right_path=np.where(left_is_corr, subset["adv_path"], subset["corr_path"]),
    )
    return subset, {"per_domain": per_domain, "selected": len(subset), "shortfall": shortfall}


def with_descriptions(images: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Each image with the description it was rendered from (D_c for I_corr, D_a for I_adv)."""
    descriptions = pd.concat(
        [
            pairs[["corr_image_id", "correct_description"]].set_axis(["image_id", "description"], axis=1),
            pairs[["adv_image_id", "adversarial_description"]].set_axis(["image_id", "description"], axis=1),
        ]
    ).drop_duplicates("image_id")
    return images.merge(descriptions, on="image_id", how="left", validate="many_to_one")


class Benchmark(NamedTuple):
    pairs: pd.DataFrame  # the kept pairs with their triplet's fields and split
    filter_validation: pd.DataFrame  # images for people to score against the VLM filter
    preference: pd.DataFrame  # test pairs for people to choose between, none showing a validation image
    counters: dict[str, Any]


def split_benchmark(
    pairs: pd.DataFrame,
    triplets: pd.DataFrame,
    domains: Sequence[str],
    vlms: Sequence[str],
    test_fraction: float,
    threshold: float,
    filter_validation_images: int,
    preference_pairs_per_domain: int,
    seed: int,
) -> Benchmark:
    """Split the kept pairs by triplet, and draw the two disjoint annotation subsets: filter validation
    from the images every one of `vlms` scored (all of them, unless the filter ran in order: then its
    validation pool's, `consensus.in_validation_pool`), preference from the kept test pairs."""
    all_pairs, kept = kept_with_splits(pairs, triplets, seed, test_fraction)
    images = with_descriptions(image_decisions(all_pairs, threshold), all_pairs)
    images = images[images["vlm_scores"].map(lambda scores: set(json.loads(scores)) >= set(vlms))]
    validation, validation_counts = filter_validation_subset(images, filter_validation_images, seed)
    preference, preference_counts = preference_subset(
        kept[kept["split"] == "test"], list(domains), preference_pairs_per_domain, set(validation["image_id"]), seed
    )
    counters = {
        "pairs_kept": len(kept),
        "per_domain_and_split": {f"{d}/{s}": int(n) for (d, s), n in kept.groupby(["domain", "split"]).size().items()},
        "filter_validation": validation_counts,
        "preference": preference_counts,
    }
    return Benchmark(kept, validation, preference, counters)
