"""No-reference image quality (MUSIQ, NIQE through pyiqa) of kept pairs, and Table 2 of the paper."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from blindspot.images import journaled_batches, read_rgb
from blindspot.models.spec import ModelSpec
from blindspot.protobias.render import triplets_of_seeds

log = logging.getLogger(__name__)


def weights_file(spec: ModelSpec) -> str:
    """pyiqa reads one weights file: the model's path, or the one file in its built folder."""
    path = Path(spec.path)
    if not path.exists():
        raise FileNotFoundError(
            f"{spec.name}: no weights at {path}. pyiqa cannot download on a compute node; place the "
            f"checkpoint there or point the registry's `id` at it (README: the paper configuration)."
        )
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        if len(files) != 1:
            raise ValueError(f"{spec.name}: expected one weights file in {path}, found {[p.name for p in files]}")
        return str(files[0])
    return spec.path


class PyiqaMetric:
    """A pyiqa metric, built once per job from a local weights file (no download)."""

    def __init__(self, spec: ModelSpec, batch_size: int):
        import pyiqa

        self.spec = spec
        self.batch_size = batch_size
        self.metric = pyiqa.create_metric(spec.metric, device=spec.device, pretrained_model_path=weights_file(spec))
        self.higher_is_better = not self.metric.lower_better

    def score(self, paths: list[str], journal_path: str | Path) -> np.ndarray:
        """One score per image file, a batch at a time; the next batch decodes while this one is scored.
        Each batch's scores go to the journal at `journal_path` (`images.journaled_batches`)."""
        import torch
        from torchvision.transforms.functional import to_tensor

        def score(batch: list[str], pixels: list[Any]) -> list[float]:
            with torch.inference_mode():
                return self.metric(torch.stack(pixels)).reshape(-1).float().cpu().tolist()

        key = ("image quality", self.spec.outputs)
        read = lambda path: to_tensor(read_rgb(path))  # noqa: E731
        scores = journaled_batches(paths, self.batch_size, read, score, journal_path, key, f"iqa {self.spec.name}")
        return np.asarray(scores.results, dtype=np.float32)


def measure_pairs(pairs: pd.DataFrame, metric: PyiqaMetric, journal_path: str | Path) -> pd.DataFrame:
    """One row per pair: the metric on I_corr and on I_adv."""
    scores = metric.score(list(pairs["corr_path"]) + list(pairs["adv_path"]), journal_path)
    n = len(pairs)
    return pd.DataFrame(
        {
            "pair_id": pairs["pair_id"].to_numpy(),
            "t2i": pairs["t2i"].to_numpy(),
            "metric": metric.spec.name,
            "higher_is_better": metric.higher_is_better,
            "corr_score": scores[:n].astype(np.float64),
            "adv_score": scores[n:].astype(np.float64),
        }
    )


def pairs_to_measure(pairs: pd.DataFrame, triplets: pd.DataFrame, seed_ids: pd.Series) -> pd.DataFrame:
    """The kept pairs of the accepted triplets written from the given seeds (a seed shard's)."""
    in_shard = triplets_of_seeds(triplets, seed_ids)["triplet_id"]
    return pairs[pairs["kept"] & pairs["triplet_id"].isin(in_shard)]


def measure_quality(
    pairs: pd.DataFrame, specs: Sequence[ModelSpec], batch_size: int, journals: str | Path
) -> pd.DataFrame:
    """Every metric on both images of each pair; the metrics are loaded one after another, and each
    journals its scores in the folder `journals` (one file per metric), so a killed job resumes."""
    Path(journals).mkdir(parents=True, exist_ok=True)
    return pd.concat(
        [measure_pairs(pairs, PyiqaMetric(spec, batch_size), Path(journals) / f"{spec.name}.jsonl") for spec in specs],
        ignore_index=True,
    )


TABLE2_CAPTION = "Table 2: no-reference image quality of I_corr and I_adv over all kept pairs."


def table2(quality: pd.DataFrame, labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Table 2: mean score of I_corr and I_adv per metric, their difference, and the share of
    pairs where I_corr has the better quality (higher or lower, as the metric says)."""
    rows = []
    for metric, frame in quality.groupby("metric", sort=False):
        higher = bool(frame["higher_is_better"].iloc[0])
        corr_better = frame["corr_score"] > frame["adv_score"] if higher else frame["corr_score"] < frame["adv_score"]
        name = (labels or {}).get(metric, metric)
        rows.append(
            {
                "Metric": f"{name} {'(higher is better)' if higher else '(lower is better)'}",
                "Mean I_corr": frame["corr_score"].mean(),
                "Mean I_adv": frame["adv_score"].mean(),
                "Delta": frame["corr_score"].mean() - frame["adv_score"].mean(),
                "I_corr better (%)": 100 * corr_better.mean(),
                "Pairs": float(len(frame)),
            }
        )
    return pd.DataFrame(rows)
