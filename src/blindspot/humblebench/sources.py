"""HumbleBench's questions table (the `make_humble_questions` step): every source the config names
(the official release, our benchmark's images, the scene-graph candidates after people's decisions)
together, with a count per source."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import schemas
from blindspot.humblebench.questions import Decisions, apply_verification, problem, questions_from_benchmark
from blindspot.humblebench.release import load_release
from blindspot.humblebench.settings import LETTERS, is_nota
from blindspot.sampling import sample_record, stratified_sample

log = logging.getLogger(__name__)


def collect_questions(
    release: str | None,
    image_dir: str | Path,
    pairs: pd.DataFrame | None,
    taxonomies: Mapping[str, Mapping[str, Any]],
    from_benchmark: Mapping[str, Any] | None,
    seed: int,
    candidates: pd.DataFrame | None,
    decisions: Decisions | None,
    limit: int | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The questions of each given source, in this order: the `release` (its images that come as bytes
    written to `image_dir`); questions about the benchmark's kept `pairs` (`from_benchmark` is the
    config's kinds and NOTA share; `taxonomies` by domain give the distractors); the scene-graph
    `candidates`, after the people's `decisions` (read from the verification file), or, without them,
    those without problems, unverified. Question ids must be unique across sources. Given a `limit`, the
    table keeps the sample of that many that everyone draws (`question_sample`).
    Returns the table (`schemas.HUMBLE_QUESTIONS`) and counters: per source (before sampling), per type, the
    sample (`sampling.sample_record`), and what became of the scene-graph candidates of each type
    (`filtering_by_type`, Table 9's counts)."""
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
            used, counts = apply_verification(written, decisions)  # it checks the decisions
            counters["scene_graph_decisions"] = counts
        else:
            flawed = [row for row in written if problem(row)]
            used = [row for row in written if not problem(row)]
            counters["scene_graph_left_out_with_problems"] = len(flawed)
            log.warning(
                "%d scene-graph questions are used unverified (no verification file); %d with problems are left out",
                len(used),
                len(flawed),
            )
        counters["scene_graph_filtering"] = filtering_by_type(written, decisions)
        rows += used
        counters["scene_graph"] = len(used)
    frame = pd.DataFrame(rows, columns=schemas.HUMBLE_QUESTIONS.names)
    duplicated = frame["question_id"][frame["question_id"].duplicated()]
    if len(duplicated):
        raise ValueError(f"question id {duplicated.iloc[0]} comes twice; question ids must be unique across sources")
    every, frame = len(frame), question_sample(frame, limit)
    counters["sample"] = sample_record(limit, len(frame), every)
    counters["questions"] = len(frame)
    counters["per_type"] = {kind: int(n) for kind, n in frame["type"].value_counts().items()}
    return frame, counters


def question_sample(questions: pd.DataFrame, limit: int | None) -> pd.DataFrame:
    """The `limit` questions everyone answers (`humblebench.limit`; all of them when None), stratified by type
    and by whether NOTA is the answer, drawn by the hash of the question id (`sampling.stratified_sample`)."""
    nota = [
        is_nota(json.loads(options)[LETTERS.index(label)])
        for options, label in zip(questions["options"], questions["label"], strict=True)
    ]
    sample = stratified_sample(questions.assign(nota_answer=nota), ("type", "nota_answer"), "question_id", limit)
    return sample.drop(columns="nota_answer")


FATES = ("keep", "modify", "delete", "undecided")  # what became of a candidate, Table 9's rows


def filtering_by_type(candidates: list[dict[str, Any]], decisions: Decisions | None) -> dict[str, dict[str, int]]:
    """Table 9's counts: per type of the candidates as written, how many there were and what became of them
    (FATES): the people's decisions, or without them the automatic check (a candidate with a problem is left
    out, `delete`; the rest are used unverified, `keep`)."""
    found: dict[str, dict[str, int]] = {}
    for row in candidates:
        if decisions is None:
            fate = "delete" if problem(row) else "keep"
        else:
            fate = decisions.table["decision"].get(row["question_id"], "") or "undecided"
        counts = found.setdefault(row["type"], dict.fromkeys(["candidates", *FATES], 0))
        counts["candidates"] += 1
        counts[fate] += 1
    return found
