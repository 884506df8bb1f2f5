"""How `snakemake -n` scales: paper scale (8,225 seeds) against 10x, at a fixed and a scaled shard size.

Prints one row per case and the ratios; the plan should grow with the number of shards (jobs),
not with the number of items. Run: .venv/bin/python bench/dry_run.py
"""

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def dry_run(config: dict) -> tuple[int, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=REPO / "config", delete=True) as handle:
        yaml.safe_dump(config, handle)
        handle.flush()
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--configfile", handle.name],
            cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
        seconds = time.perf_counter() - started
    total = int(re.search(r"^total\s+(\d+)$", result.stdout + result.stderr, flags=re.MULTILINE)[1])
    return total, seconds


def scaled(base: dict, items: int, shards: int) -> dict:
    config = yaml.safe_load(yaml.safe_dump(base))
    for domain in config["domains"].values():
        domain["n_seeds"] *= items
    config["shard_size"] *= shards
    return config


def main() -> None:
    base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cases = {
        "paper scale": scaled(base, 1, 1),
        "10x items, same shard size": scaled(base, 10, 1),
        "10x items, 10x shard size": scaled(base, 10, 10),
    }
    rows = {name: dry_run(config) for name, config in cases.items()}
    print(f"{'case':32} {'seeds':>8} {'jobs':>6} {'seconds':>8}")
    for (name, (jobs, seconds)), config in zip(rows.items(), cases.values(), strict=True):
        seeds = sum(d["n_seeds"] for d in config["domains"].values())
        print(f"{name:32} {seeds:>8} {jobs:>6} {seconds:>8.2f}")
    (paper_jobs, paper_s), (ten_jobs, ten_s), (same_jobs, same_s) = rows.values()
    print(f"10x items, same shard size: jobs x{ten_jobs / paper_jobs:.1f}, time x{ten_s / paper_s:.2f}")
    print(f"10x items, 10x shard size:  jobs x{same_jobs / paper_jobs:.1f}, time x{same_s / paper_s:.2f}")


if __name__ == "__main__":
    main()
