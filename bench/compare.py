"""The project's paths side by side with what a user would otherwise run, on the tiny models, in one
table: per comparison the peer's seconds and ours (medians over --repeats, each after a warm-up), the
speed-up, and whether the two arms' outputs agree. Arms that need another environment (the official
ImageReward and HPSv2 packages in .venv-ports, vLLM in .venv-vllm) run there as child processes.

Run: .venv/bin/python bench/compare.py [--repeats 3] [--only NAME ...] [--resources DIR] [--markdown]
Exits 1 when any comparison's outputs disagree.
"""

from __future__ import annotations

import os

# One thread per process, set before torch loads (the child environments inherit it): on a shared
# machine, torch's threads compete for the cores and the tiny models' times become noise. Jobs of the
# tiny preset run on one thread too (`job_resources.cpu_threads`).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

from timing import REPO, Row
from tiny_preset import tiny_config

# Each names a module in bench/peers with `compare(config, repeats) -> list[Row]`.
COMPARISONS = (
    "humblebench",
    "answering",
    "filter_order",
    "ports",
    "batching",
    "out_of_memory",
    "render",
    "textgen",
    "dry_run",
    "api_rate",
)
AGREE = {True: "yes", False: "NO", None: "n/a"}


def table(rows: list[Row]) -> str:
    head = f"{'what':34} {'peer':36} {'peer s':>8} {'ours s':>8} {'speed-up':>8}  agree"
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(
            f"{row.what:34} {row.peer:36} {row.peer_seconds:>8.3f} {row.ours_seconds:>8.3f} "
            f"{row.speedup:>7.2f}x  {AGREE[row.agree]}"
        )
    lines += ["", *(f"{row.what} / {row.peer}: {row.detail}" for row in rows)]
    return "\n".join(lines)


def markdown(rows: list[Row]) -> str:
    """The table as the README shows it."""
    lines = ["| what | peer | peer s | ours s | speed-up | outputs agree |", "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row.what} | {row.peer} | {row.peer_seconds:.3f} | {row.ours_seconds:.3f} | {row.speedup:.2f}x "
            f"| {AGREE[row.agree]} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", action="append", choices=COMPARISONS, help="run only these comparisons")
    parser.add_argument("--markdown", action="store_true", help="also print the table in Markdown")
    parser.add_argument("--resources", help="a folder to build the tiny models in and reuse (default: a temporary one)")
    args = parser.parse_args()
    os.chdir(REPO)  # the config's paths (templates, taxonomies) are relative to the repository
    with tempfile.TemporaryDirectory() as scratch:
        config = tiny_config(Path(args.resources or scratch).resolve())
        rows = []
        for name in args.only or COMPARISONS:
            rows += importlib.import_module(f"peers.{name}").compare(config, args.repeats)
            print(f"done: {name}", file=sys.stderr)
    print(table(rows))
    if args.markdown:
        print("\n" + markdown(rows))
    sys.exit(1 if any(row.agree is False for row in rows) else 0)


if __name__ == "__main__":
    main()
