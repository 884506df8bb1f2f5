"""Items of the report: the example grid of the paper's Figure 3, and the stages' counters."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot.io import atomic_path


def example_pairs(pairs: pd.DataFrame, per_domain: int) -> pd.DataFrame:
    """The first `per_domain` test pairs of each domain by pair id: the same examples on every run."""
    test = pairs[pairs["split"] == "test"].sort_values(["domain", "pair_id"])
    return test.groupby("domain", sort=True).head(per_domain).reset_index(drop=True)


def example_grid(examples: pd.DataFrame, scores: pd.DataFrame, labels: Mapping[str, str], path: str | Path) -> None:
    """One row per example: the neutral prompt T, I_corr, I_adv, and each metric's verdict: a check
    when it scores I_corr strictly above I_adv, a cross otherwise (ties and NaN scores fail), a dash on a
    pair it was not asked about (an API metric scores only the annotated pairs by default). `labels` maps
    metric names to their Table 3 labels, in order; a metric without a single score (an API judge skipped
    without its key) has no verdicts and is left out."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image

    scored = set(scores["metric"])
    labels = {metric: label for metric, label in labels.items() if metric in scored}
    verdicts = scores.set_index(["pair_id", "metric"])
    rows = max(len(examples), 1)
    figure = Figure(figsize=(11, 2.4 * rows), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(rows, 4, width_ratios=[2.2, 1.4, 1.4, 2.0])
    for row, pair in enumerate(examples.itertuples(index=False)):
        prompt = figure.add_subplot(grid[row, 0])
        prompt.axis("off")
        prompt.text(0, 0.5, f"[{pair.domain}]\nT: " + textwrap.fill(pair.neutral_prompt, 34), va="center", fontsize=9)
        for column, (role, title) in enumerate((("corr", "I_corr"), ("adv", "I_adv")), start=1):
            axes = figure.add_subplot(grid[row, column])
            with Image.open(getattr(pair, f"{role}_path")) as image:
                axes.imshow(image.convert("RGB"))
            axes.set_title(title, fontsize=9)
            axes.axis("off")
        marks = figure.add_subplot(grid[row, 3])
        marks.axis("off")
        lines = []
        for metric, label in labels.items():
            key = (pair.pair_id, metric)
            if key not in verdicts.index:  # never asked: an API metric scores the annotated pairs only
                lines.append(f"- {label}")
                continue
            right = bool(verdicts.loc[key, "corr_raw"] > verdicts.loc[key, "adv_raw"])
            lines.append(f"{'✓' if right else '✗'} {label}")
        marks.text(0, 0.5, "\n".join(lines), va="center", fontsize=8, family="DejaVu Sans")
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")


# The folders of the sharded stages' counters; any other counters file is named after its stage.
SHARDED_COUNTER_STAGES = ("raw", "judged", "renders", "vlm_scores", "metric_scores", "answers")


def counter_stage(path: str | Path) -> str:
    """The stage a counters file belongs to, from where it lies: raw, judged, renders, vlm_scores, ..."""
    parts = Path(path).parts
    for stage in SHARDED_COUNTER_STAGES:
        if stage in parts:
            return stage
    return Path(path).name.removesuffix(".counters.json")


def stage_counters(paths: Sequence[str | Path]) -> pd.DataFrame:
    """Every counter of the stages' `.counters.json` files, flattened: one row per (stage, file, counter),
    provenance left out, files in the order given."""
    import json

    rows: list[dict[str, Any]] = []

    def flatten(stage: str, source: str, prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                if key != "provenance":
                    flatten(stage, source, f"{prefix}.{key}" if prefix else str(key), inner)
        else:
            rows.append({"stage": stage, "file": source, "counter": prefix, "value": value})

    for source in paths:
        flatten(counter_stage(source), str(source), "", json.loads(Path(source).read_text()))
    return pd.DataFrame(rows, columns=["stage", "file", "counter", "value"])
