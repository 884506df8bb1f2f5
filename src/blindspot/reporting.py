"""Final tables as CSV, Markdown and LaTeX, written atomically."""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from pathlib import Path

import pandas as pd

from blindspot.io import write_text
from blindspot.sampling import marked_caption, marked_table

_LATEX_SPECIAL = {
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\~{}",
    "^": r"\^{}",
    "<->": r"$\leftrightarrow$",
    "->": r"$\rightarrow$",
}


def _cell(value: object, decimals: int) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return str(int(value)) if value.is_integer() else f"{value:.{decimals}f}"
    return str(value)


_LATEX_PATTERN = re.compile("|".join(re.escape(k) for k in sorted(_LATEX_SPECIAL, key=len, reverse=True)))


def latex_escape(text: str) -> str:
    """Escape LaTeX specials in one pass (so escapes are never escaped again); arrows become math."""
    return _LATEX_PATTERN.sub(lambda match: _LATEX_SPECIAL[match.group(0)], text)


# A cell to set in bold: (row position, column name).
Cell = tuple[int, str]


def _rows(table: pd.DataFrame, decimals: int, bold: Collection[Cell], mark: str) -> list[list[str]]:
    """Each row's cells as text, those in `bold` put into `mark` (a format string with one field)."""
    return [
        [mark.format(text) if (i, column) in bold else text for column, text in zip(table.columns, row, strict=True)]
        for i, row in enumerate([_cell(v, decimals) for v in values] for values in table.itertuples(index=False))
    ]


def to_markdown(table: pd.DataFrame, decimals: int = 3, bold: Collection[Cell] = ()) -> str:
    header = "| " + " | ".join(map(str, table.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in table.columns) + " |"
    body = ["| " + " | ".join(row) + " |" for row in _rows(table, decimals, bold, "**{}**")]
    return "\n".join([header, rule, *body]) + "\n"


def to_latex(table: pd.DataFrame, caption: str, decimals: int = 3, bold: Collection[Cell] = ()) -> str:
    spec = "".join("r" if pd.api.types.is_numeric_dtype(table[c]) else "l" for c in table.columns)
    escaped = table.map(lambda value: latex_escape(_cell(value, decimals)))
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{latex_escape(caption)}}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(latex_escape(str(c)) for c in table.columns) + r" \\",
        r"\midrule",
        *(" & ".join(row) + r" \\" for row in _rows(escaped, decimals, bold, r"\textbf{{{}}}")),
        r"\bottomrule",
        r"\end{tabular}",
        r"\end{table}",
    ]
    return "\n".join(lines) + "\n"


def write_report_table(
    table: pd.DataFrame,
    csv: str | Path,
    markdown: str | Path,
    latex: str | Path,
    caption: str,
    bold: Collection[Cell] = (),
    sample: str | None = None,
) -> None:
    """The table as CSV (plain values), Markdown and LaTeX (the cells in `bold` set in bold); on a `sample` (its
    label, `sampling.sample_label`) the CSV's rows and the caption say so."""
    write_text(csv, marked_table(table, sample).to_csv(index=False))
    caption = marked_caption(caption, sample)
    write_text(markdown, f"{caption}\n\n{to_markdown(table, bold=bold)}")
    write_text(latex, to_latex(table, caption, bold=bold))
