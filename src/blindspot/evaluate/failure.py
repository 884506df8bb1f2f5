"""Why the workflow that `blindspot evaluate` ran failed, in one line: the failed job, its reason and its
log. Snakemake's own log (`.snakemake/log/` in the folder it ran in) names each failed job and the job's
log; a job of ours ends its log with the one line that says why it stopped (`blindspot.steps.run_step`),
and any other job's last line is the last thing it said."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

# Where Snakemake writes its log, in the folder it runs in: one file a run, named by when it started.
SNAKEMAKE_LOGS = Path(".snakemake") / "log"
# How much of a job's log is read for its last line: a long job's progress fills the rest.
TAIL_BYTES = 1 << 16
_ERROR_IN_RULE = re.compile(r"^Error in rule (\S+):$")
_LOG_HINT = " (check log file(s) for error details)"


class FailedJob(NamedTuple):
    """A job Snakemake's log says failed: its rule, its wildcards as the log writes them ("" for none)
    and its log files."""

    rule: str
    wildcards: str
    logs: tuple[Path, ...]


def failed_jobs(snakemake_log: str, workdir: Path) -> list[FailedJob]:
    """The jobs that Snakemake's log (its text) says failed, each once (a retried job fails again), in the
    order they failed: each "Error in rule NAME:" and the indented keys under it. A relative log path is
    `workdir`'s, where Snakemake ran."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in snakemake_log.splitlines():
        started = _ERROR_IN_RULE.match(line)
        if started:
            current = {"rule": started[1]}
            blocks.append(current)
        elif current is not None and line.startswith((" ", "\t")):
            key, _, value = line.strip().partition(": ")
            current.setdefault(key, value)
        else:
            current = None
    jobs = {}
    for block in blocks:
        logs = [name for name in block.get("log", "").removesuffix(_LOG_HINT).split(", ") if name]
        job = FailedJob(block["rule"], block.get("wildcards", ""), tuple(workdir / name for name in logs))
        jobs.setdefault(job, None)
    return list(jobs)


def last_line(path: Path) -> str | None:
    """The last line of the file at `path` that is not blank (a progress bar's last state, where it ends
    with one), or None when there is none or the file cannot be read."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, 2) - TAIL_BYTES))
            tail = file.read().decode(errors="replace")
    except OSError:
        return None
    return next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), None)


def latest_snakemake_log(workdir: Path, configfile: Path) -> Path | None:
    """Snakemake's log of its latest run in `workdir`, when that run was on `configfile` (its command,
    which the log's head repeats, names it): a run on another config is not this one's."""
    logs = sorted((workdir / SNAKEMAKE_LOGS).glob("*.snakemake.log"))
    if not logs:
        return None
    head = logs[-1].read_text(errors="replace")[:TAIL_BYTES]
    return logs[-1] if str(configfile) in head else None


def _named(job: FailedJob) -> str:
    return f"{job.rule} ({job.wildcards})" if job.wildcards else job.rule


def _reason(logs: Sequence[Path]) -> tuple[str, Path | None]:
    """(the last line of the first of `logs` that has one, that log), or a sentence saying there is none."""
    for log in logs:
        line = last_line(log)
        if line:
            return line, log
    if not logs:
        return "it has no log", None
    return f"its log {logs[0]} is {'empty' if logs[0].is_file() else 'missing'}", None


def workflow_failure(configfile: str | Path, workdir: str | Path) -> str:
    """The one line that says why the workflow on `configfile`, run in `workdir`, failed: the first failed
    job, the last line of its log (our jobs' reason), where that log is, and how many more jobs failed.
    Without a failed job in Snakemake's log (the workflow stopped before a job ran), where its log is."""
    workdir = Path(workdir)
    snakemake_log = latest_snakemake_log(workdir, Path(configfile))
    if snakemake_log is None:
        return f"the workflow failed on {configfile}; its log says why (above, and in {workdir / SNAKEMAKE_LOGS})"
    jobs = failed_jobs(snakemake_log.read_text(errors="replace"), workdir)
    if not jobs:
        return f"the workflow failed on {configfile}; Snakemake's log says why: {snakemake_log}"
    reason, log = _reason(jobs[0].logs)
    where = f"; its log: {log}" if log else f"; Snakemake's log: {snakemake_log}"
    more = f" ({len(jobs) - 1} more job(s) failed, in Snakemake's log: {snakemake_log})" if len(jobs) > 1 else ""
    return f"the workflow's job {_named(jobs[0])} failed: {reason}{where}{more}"
