"""Pairs scored per second by each metric plug-in on the tiny models: batched against one pair at
a time, both arms in this process on the same pairs, taking turns (`timing.timed_arms`: the median of
--repeats calls after a warm-up); the ratio is what to read.

The API judge is left out (it needs a server; tests/test_api_judge.py runs one), and so is ProtoScore
(it needs a scorer trained on a benchmark). A metric's helper models (`models:`) are built and passed.
Run: .venv/bin/python bench/metric_throughput.py [--pairs 16] [--batch 8] [--repeats 3] [--threads N]
     [--resources DIR] [--only NAME ...]
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from timing import timed_arms
from tiny_preset import build_models, tiny_config

from blindspot.config import model_spec
from blindspot.metrics import Metric, load_metric


def pairs_per_second(
    one_at_a_time: Metric, batched: Metric, prompts: list[str], images: list[Image.Image], pairs: int, repeats: int
) -> tuple[float, float]:
    """Pairs per second of each metric scoring all of `prompts` (`pairs` pairs): one per call, and all at once."""
    (single_seconds, _), (batched_seconds, _) = timed_arms(
        [
            lambda: [one_at_a_time.score([p], [i]) for p, i in zip(prompts, images, strict=True)],
            lambda: batched.score(prompts, images),
        ],
        repeats,
    )
    return pairs / single_seconds, pairs / batched_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--resources", help="a folder to build the tiny models in and reuse (default: a temporary one)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per arm (the median), after a warm-up")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch's threads (default: its own); 1 on a busy shared machine, where waiting threads spin",
    )
    parser.add_argument("--only", action="append", help="measure only these metrics (the tiny preset's names)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    prompts = [f"a penguin on a rock with exactly {i % 4 + 1} stones" for i in range(2 * args.pairs)]
    images = [Image.fromarray(rng.integers(0, 255, (96, 96, 3), dtype=np.uint8)) for _ in prompts]
    with tempfile.TemporaryDirectory() as scratch:
        resources = str(Path(args.resources or scratch).resolve())
        config = tiny_config(resources)
        metrics = {
            name: entry
            for name, entry in config["evaluation"]["metrics"].items()
            if entry["plugin"] not in {"api_judge", "protoscore"} and (not args.only or name in args.only)
        }
        build_models(
            config, {m for entry in metrics.values() for m in [entry["model"], *entry.get("models", {}).values()]}
        )
        print(f"{'metric':12} {'one at a time':>14} {'batched':>10} {'ratio':>6}   (pairs/s, {args.pairs} pairs)")
        for name, entry in metrics.items():
            spec = model_spec(config, entry["model"])
            helpers = {arg: model_spec(config, model) for arg, model in entry.get("models", {}).items()}
            metrics_by_size = [
                load_metric(entry["plugin"], spec, size, resources, **entry.get("args", {}), **helpers)
                for size in (1, args.batch)
            ]
            single, batched = pairs_per_second(*metrics_by_size, prompts, images, args.pairs, args.repeats)
            print(f"{name:12} {single:>14.2f} {batched:>10.2f} {batched / single:>6.2f}")


if __name__ == "__main__":
    main()
