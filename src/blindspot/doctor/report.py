"""The report of `blindspot doctor`: one verdict line per check, each with its reason, printed as an
aligned table with a count of each verdict; the command exits 1 when any line is FAIL."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True)
class Check:
    check: str  # what kind of check: model, token, api key, disk, gpus, ...
    subject: str  # what it is about: a registry name, a variable, a folder, a GPU count
    verdict: str  # OK, WARN or FAIL
    reason: str


def failed(checks: list[Check]) -> bool:
    return any(check.verdict == FAIL for check in checks)


def render(checks: list[Check]) -> str:
    """The checks as an aligned table, then a count of each verdict."""
    rows = [("check", "subject", "verdict", "reason"), *((c.check, c.subject, c.verdict, c.reason) for c in checks)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)) + "  " + row[3]
        for row in rows
    ]
    counts = {verdict: sum(c.verdict == verdict for c in checks) for verdict in (FAIL, WARN, OK)}
    lines += ["", f"{counts[FAIL]} failed, {counts[WARN]} warnings, {counts[OK]} ok"]
    return "\n".join(lines) + "\n"
