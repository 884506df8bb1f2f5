"""What HumbleBench's questions are like, from the questions table and its counters: Figure 2 of the paper
(the distributions of the correct answers, NOTA apart, and of the question types) as a table and a plot,
and Table 9 (what the manual filtering did to the candidates of each type), for the scene-graph questions
this project writes; the release keeps no record of its own filtering."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from blindspot import schemas
from blindspot.humblebench.settings import LETTERS, TYPES, is_nota
from blindspot.humblebench.sources import FATES
from blindspot.io import atomic_path

NOTA = "NOTA"
PANELS = {"answer": "(a) Correct answer", "type": "(b) Question type"}


def correct_answer(row: Mapping[str, Any]) -> str:
    """A question's correct answer as Figure 2 counts it: NOTA when the correct option is NOTA, else its letter."""
    options = json.loads(row["options"])
    return NOTA if is_nota(options[LETTERS.index(row["label"])]) else row["label"]


def _conform(frame: pd.DataFrame, schema: pa.Schema) -> pd.DataFrame:
    """The frame as its schema has it (columns, order, types); a mismatch raises pyarrow's error."""
    return pa.Table.from_pandas(frame, schema=schema, preserve_index=False).to_pandas()


def figure2_caption(questions: int) -> str:
    return f"Figure 2: HumbleBench's {questions:,} questions by correct answer and by type (count, %)"


def figure2_table(questions: pd.DataFrame) -> pd.DataFrame:
    """Figure 2's numbers (`schemas.HUMBLE_DISTRIBUTIONS`): per panel, each value with its questions and share
    (%), the letters and NOTA in order, then the types in the paper's order, then any other type."""
    if questions.empty:
        raise ValueError("no HumbleBench questions: no source gave any (release, from_benchmark, scene_graphs)")
    answers = pd.Series([correct_answer(row) for row in questions.to_dict("records")], dtype=object)
    rows = []
    for panel, values, order in (
        ("answer", answers, [*LETTERS, NOTA]),
        ("type", questions["type"], [*TYPES, *sorted(set(questions["type"]) - set(TYPES))]),
    ):
        counts = values.value_counts()
        rows += [
            {
                "panel": PANELS[panel],
                "value": value,
                "questions": int(counts[value]),
                "percent": round(100 * counts[value] / len(values), 2),
            }
            for value in order
            if value in counts
        ]
    return _conform(pd.DataFrame(rows), schemas.HUMBLE_DISTRIBUTIONS)


def plot_figure2(table: pd.DataFrame, path: str | Path) -> None:
    """Figure 2 as two bar charts, each bar a value's share of the questions and labelled with its count."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9.0, 3.6), dpi=150, layout="constrained")
    FigureCanvasAgg(figure)
    for i, title in enumerate(PANELS.values()):
        part = table[table["panel"] == title]
        axes = figure.add_subplot(1, len(PANELS), i + 1)
        bars = axes.bar(part["value"], part["percent"], color=[f"C{j % 10}" for j in range(len(part))])
        axes.bar_label(bars, labels=[f"{n:,}" for n in part["questions"]], fontsize="small")
        axes.set_title(title)
        axes.set_ylabel("% of questions")
        axes.set_ylim(0, max(part["percent"].max() * 1.15, 1))
    figure.suptitle(f"HumbleBench: {int(part['questions'].sum()):,} questions")
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")


TABLE9_ROWS = {
    "candidates": "Candidates",
    "keep": "Kept",
    "modify": "Modified",
    "delete": "Deleted",
    "undecided": "Undecided",
    "final": "Final",
    "final_share": "Final (%)",
}


TABLE9_CAPTION = "Table 9: the filtering of the scene-graph candidates per type (% of the type's candidates)"


def table9(filtering: Mapping[str, Mapping[str, int]]) -> pd.DataFrame:
    """Table 9 (`schemas.HUMBLE_FILTERING`), as the paper lays it out: per question type and in total, the
    candidates, the shares of them kept, modified and deleted (and left undecided, which are not used: a row
    only when there are some), the final questions (kept and modified) and their share, percentages of the
    candidates of that type. `filtering` is make_humble_questions' `scene_graph_filtering` counter."""
    other = sorted(set(filtering) - set(TYPES))
    if other:
        raise ValueError(f"scene-graph candidates of type {other[0]!r}, not one of {', '.join(TYPES)}")
    counts = {kind: dict(filtering.get(kind, {})) for kind in TYPES}
    counts["Total"] = {key: sum(found.get(key, 0) for found in counts.values()) for key in ("candidates", *FATES)}
    for found in counts.values():
        found["final"] = found.get("keep", 0) + found.get("modify", 0)
    rows = []
    for key, title in TABLE9_ROWS.items():
        if key == "undecided" and not counts["Total"]["undecided"]:
            continue
        row: dict[str, Any] = {"measure": title}
        for kind, found in counts.items():
            if key in ("candidates", "final"):
                row[kind] = float(found.get(key, 0))
            else:
                part = found["final"] if key == "final_share" else found.get(key, 0)
                row[kind] = round(100 * part / found["candidates"], 2) if found.get("candidates") else float("nan")
        rows.append(row)
    return _conform(pd.DataFrame(rows), schemas.HUMBLE_FILTERING)
