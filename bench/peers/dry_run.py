"""`snakemake -n` of the paper config at paper scale (8,225 seeds) and at 10x the items with the same
shard size, and the project's share of it.

The plan grows with the jobs, so 10x the items at one shard size is 10x the jobs, and most of the time
is Snakemake's own: building the DAG, evaluating every job's input functions, params and resources
(each through `inspect.signature`), and printing the jobs. The project's share is what a profile of the
same run (cProfile) spends inside the project's code (the Snakefile and rules, `blindspot`), called from
Snakemake: the outermost project frames' cumulative time over the whole run's.
"""

from __future__ import annotations

import pstats
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from timing import REPO, Row, timed

PROJECT = (str(REPO / "src" / "blindspot"), str(REPO / "workflow"))
LIMIT_SECONDS = 10.0  # the 10x dry run's goal; else the project's share must stay under SHARE_LIMIT
SHARE_LIMIT = 0.2


def scaled(base: dict, items: int) -> dict:
    config = yaml.safe_load(yaml.safe_dump(base))
    for domain in config["domains"].values():
        domain["n_seeds"] *= items
    return config


def dry_run(configfile: Path, profile: Path | None = None) -> int:
    """Run `snakemake -n` (under cProfile, writing `profile`, when given); the number of jobs it plans."""
    profiler = ["-m", "cProfile", "-o", str(profile)] if profile else []
    result = subprocess.run(
        [sys.executable, *profiler, "-m", "snakemake", "-n", "--quiet", "rules", "--configfile", str(configfile)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(re.search(r"^total\s+(\d+)$", result.stdout + result.stderr, flags=re.MULTILINE)[1])


def project_share(profile: Path) -> float:
    """The share of the profiled run spent in the project's code, counting each call stack once: the
    cumulative time of project functions that no project function called. An anonymous frame (a
    generator expression, a comprehension, a lambda) is never outermost: it runs inside the function
    that made it, even where a builtin (`max`, `any`) calls it."""
    stats = pstats.Stats(str(profile)).stats
    ours = {key for key in stats if key[0].startswith(PROJECT)}
    named = {key for key in ours if not key[2].startswith("<")}
    outermost = sum(stats[key][3] for key in named if not set(stats[key][4]) & ours)
    total = max(entry[3] for entry in stats.values())
    return outermost / total


def compare(config: dict, repeats: int) -> list[Row]:
    del config  # the paper config, not the tiny preset
    base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for label, items in (("paper scale", 1), ("10x items", 10)):
            configfile = Path(scratch) / f"x{items}.yaml"
            configfile.write_text(yaml.safe_dump(scaled(base, items)))
            seeds = sum(domain["n_seeds"] for domain in scaled(base, items)["domains"].values())
            seconds, jobs = timed(lambda configfile=configfile: dry_run(configfile), repeats)
            profile = Path(scratch) / f"x{items}.prof"
            dry_run(configfile, profile)
            share = project_share(profile)
            within = seconds < LIMIT_SECONDS or share < SHARE_LIMIT
            rows.append(
                Row(
                    what=f"snakemake -n, {label}",
                    peer="Snakemake's own work",
                    peer_seconds=seconds * (1 - share),
                    ours_seconds=seconds * share,
                    agree=None,
                    detail=(
                        f"{seeds:,} seeds, {jobs:,} jobs (shard size {base['shard_size']}) in {seconds:.1f} s; the "
                        f"project's share {share:.0%} ({'within' if within else 'NOT within'} the goal: under "
                        f"{LIMIT_SECONDS:.0f} s, or a share under {SHARE_LIMIT:.0%})"
                    ),
                )
            )
    return rows
