"""Images per second with the tiny pipelines: one batched call against one call per image.

Both arms run in this process on the same prompts and seeds; the ratio is what to read.
Run: .venv/bin/python bench/render_throughput.py [--images 16] [--batch 8]
"""

import argparse
import tempfile
import time

from tiny_preset import build_models, tiny_config

from blindspot.models.spec import model_spec
from blindspot.protobias.render import DiffusersRenderer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    prompts = [f"a penguin on a rock with exactly {i % 4 + 1} stones" for i in range(args.images)]
    seeds = list(range(args.images))
    with tempfile.TemporaryDirectory() as resources:
        config = tiny_config(resources)
        print(f"{'model':12} {'one at a time':>14} {'batched':>10} {'ratio':>6}   (images/s, {args.images} images)")
        for name in config["image_stage"]["t2i_models"]:
            build_models(config, {name})
            renderer = DiffusersRenderer(model_spec(config, name))
            renderer.render(prompts[:1], seeds[:1])  # warm-up
            started = time.perf_counter()
            for prompt, seed in zip(prompts, seeds, strict=True):
                renderer.render([prompt], [seed])
            single = args.images / (time.perf_counter() - started)
            started = time.perf_counter()
            for start in range(0, args.images, args.batch):
                renderer.render(prompts[start : start + args.batch], seeds[start : start + args.batch])
            batched = args.images / (time.perf_counter() - started)
            print(f"{name:12} {single:>14.2f} {batched:>10.2f} {batched / single:>6.2f}")


if __name__ == "__main__":
    main()
