"""HumbleBench's questions table (the `make_humble_questions` step): every source the config names
(the official release, our benchmark's images, the scene-graph candidates after people's decisions)
together, with a count per source."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import tables
from blindspot.humblebench.questions import Decisions, apply_verification, problem, questions_from_benchmark
from blindspot.humblebench.release import load_release

log = logging.getLogger(__name__)


def collect_questions(
    release: str | None, image_dir: str | Path, pairs: pd.DataFrame | None, taxonomies: Mapping[str, Mapping[str, Any]],
    from_benchmark: Mapping[str, Any] | None, seed: int, candidates: pd.DataFrame | None, decisions: Decisions | None,
) -> tuple[pd.DataFrame, dict[str, Any]]:  # fmt: skip
    """The questions of each given source, in this order: the `release` (its images that come as bytes
    written to `image_dir`); questions about the benchmark's kept `pairs` (`from_benchmark` is the
    config's kinds and NOTA share; `taxonomies` by domain give the distractors); the scene-graph
    `candidates`, after the people's `decisions` (read from the verification file), or, without them,
    those without problems, unverified. Question ids must be unique across sources.
    Returns the table (`tables.HUMBLE_QUESTIONS`) and counters."""
    rows: list[dict[str, Any]] = []
    counters: dict[str, Any] = {}
    if release:
        rows += load_release(release, image_dir)
        counters["release"] = len(rows)
    if pairs is not None:
        built, skipped = questions_from_benchmark(
            pairs, taxonomies, from_benchmark["kinds"], from_benchmark["nota_share"], seed
        )
        rows += built
        counters |= {"benchmark": len(built), "benchmark_kinds_without_a_question": skipped}
    if candidates is not None:
        written = candidates.to_dict("records")
        if decisions is not None:
            written, counts = apply_verification(written, decisions)
            counters["scene_graph_decisions"] = counts
        else:
            flawed = [row for row in written if problem(row)]
            written = [row for row in written if not problem(row)]
            counters["scene_graph_left_out_with_problems"] = len(flawed)
            log.warning("%d scene-graph questions are used unverified (no verification file); %d with problems are "
                        "left out", len(written), len(flawed))  # fmt: skip
        rows += written
        counters["scene_graph"] = len(written)
    frame = pd.DataFrame(rows, columns=tables.HUMBLE_QUESTIONS.names)
    duplicated = frame["question_id"][frame["question_id"].duplicated()]
    if len(duplicated):
        raise ValueError(f"question id {duplicated.iloc[0]} comes twice; question ids must be unique across sources")
    counters["questions"] = len(frame)
    counters["per_type"] = {kind: int(n) for kind, n in frame["type"].value_counts().items()}
    return frame, counters
