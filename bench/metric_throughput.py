"""Pairs scored per second by each metric plug-in on the tiny models: batched against one pair at
a time, both arms in this process on the same pairs; the ratio is what to read.

The API judge is left out (it needs a server; tests/test_api_judge.py runs one).
Run: .venv/bin/python bench/metric_throughput.py [--pairs 16] [--batch 8]
"""

import argparse
import tempfile
import time

import numpy as np
from PIL import Image
from tiny_preset import build_models, tiny_config

from blindspot.config import model_spec
from blindspot.metrics import load_metric


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    prompts = [f"a penguin on a rock with exactly {i % 4 + 1} stones" for i in range(2 * args.pairs)]
    images = [Image.fromarray(rng.integers(0, 255, (96, 96, 3), dtype=np.uint8)) for _ in prompts]
    with tempfile.TemporaryDirectory() as resources:
        config = tiny_config(resources)
        metrics = {n: m for n, m in config["evaluation"]["metrics"].items() if m["plugin"] != "api_judge"}
        build_models(config, {m["model"] for m in metrics.values()})
        print(f"{'metric':12} {'one at a time':>14} {'batched':>10} {'ratio':>6}   (pairs/s, {args.pairs} pairs)")
        for name, entry in metrics.items():
            spec = model_spec(config, entry["model"])
            arms = {}
            for batch in (1, args.batch):
                metric = load_metric(entry["plugin"], spec, batch, resources, **entry.get("args", {}))
                metric.score(prompts[:2], images[:2])  # warm-up
                started = time.perf_counter()
                if batch == 1:
                    for prompt, image in zip(prompts, images, strict=True):
                        metric.score([prompt], [image])
                else:
                    metric.score(prompts, images)
                arms[batch] = args.pairs / (time.perf_counter() - started)
            single, batched = arms[1], arms[args.batch]
            print(f"{name:12} {single:>14.2f} {batched:>10.2f} {batched / single:>6.2f}")


if __name__ == "__main__":
    main()
