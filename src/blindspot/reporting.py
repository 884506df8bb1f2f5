"""Final tables as CSV, Markdown and LaTeX, written atomically."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from blindspot.io import write_text

_LATEX_SPECIAL = {
    "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\~{}", "^": r"\^{}",
    "<->": r"$\leftrightarrow$", "->": r"$\rightarrow$",
}  # fmt: skip


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


def to_markdown(table: pd.DataFrame, decimals: int = 3) -> str:
    header = "| " + " | ".join(map(str, table.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in table.columns) + " |"
    body = ["| " + " | ".join(_cell(v, decimals) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"


def to_latex(table: pd.DataFrame, caption: str, decimals: int = 3) -> str:
    spec = "".join("r" if pd.api.types.is_numeric_dtype(table[c]) else "l" for c in table.columns)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{latex_escape(caption)}}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(latex_escape(str(c)) for c in table.columns) + r" \\",
        r"\midrule",
        *(" & ".join(latex_escape(_cell(v, decimals)) for v in row) + r" \\" for row in table.itertuples(index=False)),
        r"\bottomrule",
        r"\end{tabular}",
        r"\end{table}",
    ]
    return "\n".join(lines) + "\n"


def write_report_table(
    table: pd.DataFrame, csv: str | Path, markdown: str | Path, latex: str | Path, caption: str
) -> None:
    write_text(csv, table.to_csv(index=False))
    write_text(markdown, f"{caption}\n\n{to_markdown(table)}")
    write_text(latex, to_latex(table, caption))
