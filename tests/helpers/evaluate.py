import sys
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from helpers.workflow import REPO

# `blindspot evaluate humblebench` as people run it: shared by the tests of its state and its records.
EVALUATED_TYPES = ("Object", "Attribute", "Relation", "Object")


# Tables 4-6 need the config's original and stress settings; noise adds a third answer job to be cut off in.
EVALUATED_SETTINGS = ("original", "nota_only", "noise")


def _evaluate_options(release: Path, results: Path) -> list[str]:
    settings = [part for name in EVALUATED_SETTINGS for part in ("--setting", name)]
    return ["--release", str(release), "--vlm", "tiny-qwen2.5-vl", *settings, "--results-dir", str(results)]


def docs_example() -> str:
    """The Python example of docs/usage.md (From Python), as a notebook runs it."""
    text = (REPO / "docs" / "usage.md").read_text()
    return text.split("<!-- evaluate-example:", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def evaluate_humblebench(release: Path, results: Path) -> list[str]:
    """`blindspot evaluate humblebench` of `release` into `results` by the tiny Qwen2.5-VL, as a command line."""
    evaluate = [sys.executable, "-m", "blindspot.cli", "evaluate", "humblebench"]
    return [*evaluate, *_evaluate_options(release, results), "--cores", "1"]


GOOD_RECORD = {
    "question_id": "q1",
    "label": "E",
    "type": "Object",
    "image": "pixel.png",
    "question": "What is it?\nA. a\nB. b\nC. c\nD. d\nE. None of the above",
}


def noise_png(path: Path, seed: int) -> Path:
    """A 32x32 PNG of noise, which compresses little: cut in half, its image data is cut."""
    pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def pairs_csv(folder: Path) -> Path:
    """Three pairs, their images beside the table: g0.png/b0.png, ..."""
    for i in range(3):
        noise_png(folder / f"g{i}.png", i)
        noise_png(folder / f"b{i}.png", 10 + i)
    rows = [{"neutral_prompt": f"a cat {i}", "image_corr": f"g{i}.png", "image_adv": f"b{i}.png"} for i in range(3)]
    pd.DataFrame(rows).to_csv(folder / "pairs.csv", index=False)
    return folder / "pairs.csv"


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
