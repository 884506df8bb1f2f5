"""`blindspot view` at paper scale: build the site of 45,400 ProtoBias pairs scored by 9 metrics, then open it in
headless Chromium from file:// and time until the first page's images have loaded.

The images are a pool of --images noise PNGs (--size px; noise does not compress, so the site's size against
the images' is an upper bound), the pairs drawing theirs from it: the thumbnails are made once per image, so
the build's cost is the records' and the pool's. It prints the build's seconds, the site's size against the
images', and the seconds to the first images; the ratio site/images is the one to watch.
Run: .venv/bin/python bench/view_bench.py [--pairs 45400] [--metrics 9] [--images 2000] [--size 512]
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from blindspot import schemas
from blindspot.io import write_records
from blindspot.view import build_site

CHROMIUM = "/usr/bin/chromium"


def records(folder: Path, pairs: int, metrics: int, images: int, size: int) -> tuple[Path, int]:
    rng = np.random.default_rng(0)
    pool = []
    for i in range(images):
        path = folder / "images" / f"{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)
        pool.append(str(path))
    n = pairs * metrics
    corr, adv = rng.random(n), rng.random(n)
    frame = pd.DataFrame(
        {
            "metric": np.tile([f"metric{m}" for m in range(metrics)], pairs),
            "pair_id": np.repeat([f"p{i}" for i in range(pairs)], metrics),
            "domain": np.repeat(rng.choice(["animals", "objects", "people", "scenes"], pairs), metrics),
            "knob": np.repeat(rng.choice(["count", "colour", "scale"], pairs), metrics),
            "prompt": np.repeat([f"a neutral prompt number {i}" for i in range(pairs)], metrics),
            "corr_image": np.repeat(rng.choice(pool, pairs), metrics),
            "adv_image": np.repeat(rng.choice(pool, pairs), metrics),
            "corr_raw": corr,
            "adv_raw": adv,
            "corr_score": corr,
            "adv_score": adv,
            "margin": corr - adv,
            "correct": corr > adv,
            "outcome": np.where(corr > adv, "right", "wrong"),
            "corr_detail": "",
            "adv_detail": "",
        }
    )
    path = folder / "tables" / "protobias_records.jsonl"
    write_records(path, frame, schemas.PROTOBIAS_RECORDS)
    return path, sum(Path(p).stat().st_size for p in pool)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=45400)
    parser.add_argument("--metrics", type=int, default=9)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--size", type=int, default=512)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="view-bench-") as folder:
        folder = Path(folder)
        path, image_bytes = records(folder, args.pairs, args.metrics, args.images, args.size)
        start = time.perf_counter()
        index = build_site(path, folder / "site")
        built = time.perf_counter() - start
        site_bytes = sum(p.stat().st_size for p in (folder / "site").rglob("*") if p.is_file())
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            start = time.perf_counter()
            page.goto(index.resolve().as_uri())
            page.wait_for_function(
                "() => [...document.querySelectorAll('.item img')].slice(0, 6).every(i => i.complete && i.naturalWidth)"
            )
            opened = time.perf_counter() - start
            browser.close()
    print(
        f"| {args.pairs} pairs x {args.metrics} metrics, {args.images} images of {args.size} px | build {built:.1f} s "
        f"| site {site_bytes / 1e6:.1f} MB = {site_bytes / image_bytes:.2f} of the images' {image_bytes / 1e6:.0f} MB "
        f"| first images in {opened:.1f} s |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
