"""Keep an image pair only when every VLM finds both images faithful to their own descriptions.

The filter is an AND, so the VLMs may run in order (`image_stage.filter_order: sequential`): each later one
scores only the images of the pairs every earlier one passed (`still_open`), since its score cannot keep a
pair an earlier one rejected, and the images of the validation pool's pairs (`in_validation_pool`), which
every VLM scores, so that Appendix D's subset is drawn from images with every VLM's score. The kept pairs are
those of every VLM scoring every image (`filter_order: every`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from blindspot.io import stable_id


def pair_images(renders: pd.DataFrame) -> pd.DataFrame:
    """One row per (triplet, T2I model, seed): the I_corr and I_adv rendered from the same noise."""
    keys = ["triplet_id", "t2i", "seed"]
    corr = renders[renders["role"] == "corr"].set_index(keys)
    adv = renders[renders["role"] == "adv"].set_index(keys)
    if set(corr.index) != set(adv.index) or not corr.index.is_unique:
        raise ValueError("renders do not pair up: every I_corr needs its I_adv with the same triplet, model and seed")
    pairs = corr[["image_id", "path"]].join(adv[["image_id", "path"]], suffixes=("_corr", "_adv")).reset_index()
    pairs = pairs.rename(
        columns={
            "image_id_corr": "corr_image_id",
            "image_id_adv": "adv_image_id",
            "path_corr": "corr_path",
            "path_adv": "adv_path",
        }
    )
    pairs.insert(
        0, "pair_id", [stable_id(c, a) for c, a in zip(pairs["corr_image_id"], pairs["adv_image_id"], strict=True)]
    )
    return pairs.sort_values("pair_id", ignore_index=True)


def in_validation_pool(pair_ids: Sequence[str], share: float, seed: int) -> np.ndarray:
    """Whether each pair is in the validation pool: a fixed `share` of the pairs by a hash of their ids, whose
    images every VLM scores whatever the others said (Appendix D's subset is drawn from them)."""
    draws = [int(stable_id("validation pool", pair_id, seed)[:12], 16) / 16**12 for pair_id in pair_ids]
    return np.asarray(draws) < share


def _score_table(scores: pd.DataFrame, vlms: Sequence[str], score: str) -> pd.DataFrame:
    """Image x VLM: each VLM's score of each image it scored (NaN where it did not)."""
    table = scores.pivot_table(index="image_id", columns="vlm", values=f"{score}_score", aggfunc="first")
    return table.reindex(columns=list(vlms))


def still_open(
    renders: pd.DataFrame,
    earlier: pd.DataFrame,
    vlms: Sequence[str],
    threshold: float,
    score: str,
    pool_share: float,
    seed: int,
) -> pd.DataFrame:
    """The renders a VLM after `vlms` (the earlier ones, whose `earlier` scores these are) scores: both images of
    each pair that every earlier VLM passed, and of each pair in the validation pool (`in_validation_pool`)."""
    pairs = pair_images(renders)
    table = _score_table(earlier, vlms, score)
    corr = table.reindex(pairs["corr_image_id"]).to_numpy()
    adv = table.reindex(pairs["adv_image_id"]).to_numpy()
    passed = ((corr >= threshold) & (adv >= threshold)).all(axis=1)  # a missing score is no pass
    open_pairs = pairs[passed | in_validation_pool(pairs["pair_id"], pool_share, seed)]
    return renders[renders["image_id"].isin(set(open_pairs["corr_image_id"]) | set(open_pairs["adv_image_id"]))]


def keep_consensus_pairs(
    pairs: pd.DataFrame, scores: pd.DataFrame, vlms: Sequence[str], threshold: float, score: str
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Every pair with its per-VLM scores and `kept`; kept when both images score >= threshold by every VLM. A
    VLM may lack a pair's scores only where an earlier VLM (in `vlms` order) rejected the pair (`still_open`):
    the pair's `vlm_scores` and minimums are then those of the VLMs that scored it, and it is not kept."""
    table = _score_table(scores, vlms, score)
    corr = table.reindex(pairs["corr_image_id"]).to_numpy()
    adv = table.reindex(pairs["adv_image_id"]).to_numpy()
    scored = ~np.isnan(corr) & ~np.isnan(adv)  # pairs x vlms
    passes = (corr >= threshold) & (adv >= threshold)
    rejected_before = np.cumsum(~passes, axis=1) - ~passes > 0  # some earlier VLM rejected the pair
    unexplained = ~scored & ~rejected_before
    if unexplained.any():
        row, column = np.argwhere(unexplained)[0]
        image = pairs["corr_image_id"].iloc[row] if np.isnan(corr[row, column]) else pairs["adv_image_id"].iloc[row]
        raise ValueError(
            f"{int(unexplained.any(axis=1).sum())} pairs lack a score from a VLM that no earlier VLM rejected them "
            f"before, e.g. image {image} from {vlms[column]}"
        )
    out = pairs.assign(
        vlm_scores=[
            json.dumps(
                {vlm: {"corr": float(c[j]), "adv": float(a[j])} for j, vlm in enumerate(vlms) if known[j]},
                sort_keys=True,
            )
            for c, a, known in zip(corr, adv, scored, strict=True)
        ],
        min_corr_score=np.nanmin(corr, axis=1),
        min_adv_score=np.nanmin(adv, axis=1),
        kept=passes.all(axis=1),
    )
    counters = {
        "pairs_in": len(out),
        "pairs_kept": int(out["kept"].sum()),
        "kept_per_t2i": {k: int(v) for k, v in out[out["kept"]].groupby("t2i").size().items()},
        "rejections_per_vlm": {vlm: int((scored[:, j] & ~passes[:, j]).sum()) for j, vlm in enumerate(vlms)},
        # image scores the filter's order saved: a later VLM did not score a pair an earlier one rejected
        "scores_saved": int(2 * (~scored).sum()),
        "threshold": threshold,
        "score": score,
    }
    return out, counters
