"""Keep an image pair only when every VLM finds both images faithful to their own descriptions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

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


def keep_consensus_pairs(
    pairs: pd.DataFrame, scores: pd.DataFrame, vlms: Sequence[str], threshold: float, score: str
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Every pair with its per-VLM scores and `kept`; kept when both images score >= threshold by every VLM."""
    column = f"{score}_score"
    table = scores.pivot_table(index="image_id", columns="vlm", values=column, aggfunc="first")
    table = table.reindex(columns=list(vlms))
    needed = pd.Index(pairs["corr_image_id"]).append(pd.Index(pairs["adv_image_id"]))
    missing = needed.difference(table.dropna().index)
    if len(missing):
        raise ValueError(f"{len(missing)} images lack a score from some VLM, e.g. {list(missing[:3])}")
    corr, adv = table.loc[pairs["corr_image_id"]].to_numpy(), table.loc[pairs["adv_image_id"]].to_numpy()
    passes = (corr >= threshold) & (adv >= threshold)  # pairs x vlms
    out = pairs.assign(
        vlm_scores=[
            json.dumps({vlm: {"corr": float(c[j]), "adv": float(a[j])} for j, vlm in enumerate(vlms)}, sort_keys=True)
            for c, a in zip(corr, adv, strict=True)
        ],
        min_corr_score=corr.min(axis=1),
        min_adv_score=adv.min(axis=1),
        kept=passes.all(axis=1),
    )
    counters = {
        "pairs_in": len(out),
        "pairs_kept": int(out["kept"].sum()),
        "kept_per_t2i": {k: int(v) for k, v in out[out["kept"]].groupby("t2i").size().items()},
        "rejections_per_vlm": {vlm: int((~passes[:, j]).sum()) for j, vlm in enumerate(vlms)},
        "threshold": threshold,
        "score": score,
    }
    return out, counters
