"""Checks every metric plug-in must pass on a tiny model, and the runner of the official packages'
scripts in .venv-ports."""

import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
PORTS_PYTHON = REPO / ".venv-ports" / "bin" / "python"


def run_official(script: str, *args: str) -> None:
    """Run tests/ports/`script` with the official packages' environment."""
    if not PORTS_PYTHON.exists():
        pytest.fail(f"{PORTS_PYTHON} is missing: run ./setup.sh --ports (or deselect with -m 'not ports')")
    command = [str(PORTS_PYTHON), str(REPO / "tests" / "ports" / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def official_scores(script: str, model_args: list[str], prompts: list[str], pictures: list, folder: Path):
    """Save the pictures as PNG, have the official package score (prompt, PNG) pairs through
    tests/ports/`script` (`model_args`, then the pairs file and the output file), and return its
    scores with the pictures read back from the PNGs, for the port to score the same pixels."""
    import json

    from PIL import Image

    paths = []
    for i, picture in enumerate(pictures):
        paths.append(str(folder / f"{i}.png"))
        picture.save(paths[-1])
    (folder / "pairs.json").write_text(json.dumps({"prompts": prompts, "images": paths}))
    run_official(script, *model_args, str(folder / "pairs.json"), str(folder / "official.json"))
    return json.loads((folder / "official.json").read_text())["scores"], [Image.open(path) for path in paths]


def assert_scores_are_per_pair(metric, prompts: list[str], pictures: list, scores: list[float]) -> None:
    """Batching (and padding) does not change a pair's score, and both the prompt and the image matter."""
    alone = [metric.score([p], [i])[0].raw for p, i in zip(prompts, pictures, strict=True)]
    assert alone == pytest.approx(scores, abs=1e-5)
    one_image = [s.raw for s in metric.score(prompts, [pictures[0]] * len(prompts))]
    assert len({round(s, 6) for s in one_image}) == len(prompts)
    one_prompt = [s.raw for s in metric.score([prompts[0]] * len(pictures), pictures)]
    assert len({round(s, 6) for s in one_prompt}) == len(pictures)


def assert_half_precision_close(build, prompts: list[str], pictures: list, tolerance: float) -> None:
    """`build(dtype)` gives the metric; float16 scores stay within `tolerance` of float32's."""
    exact = [s.raw for s in build("float32").score(prompts, pictures)]
    half = [s.raw for s in build("float16").score(prompts, pictures)]
    assert half == pytest.approx(exact, abs=tolerance)


def assert_refuses_unpaired(metric, prompts: list[str], pictures: list) -> None:
    with pytest.raises(ValueError, match=f"{len(prompts)} prompts for {len(pictures)} images"):
        metric.score(prompts, pictures)


def images_of_every_mode(n: int) -> list[Image.Image]:
    """Random pictures of several sizes and modes (RGB, grey, RGBA), landscape and portrait."""
    rng = np.random.default_rng(0)
    pictures = []
    for i in range(n):
        shape = (40 + 12 * i, 64 - 6 * i)
        mode = ("RGB", "L", "RGBA")[i % 3]
        channels = {"RGB": (3,), "L": (), "RGBA": (4,)}[mode]
        pictures.append(Image.fromarray(rng.integers(0, 255, shape + channels, dtype=np.uint8), mode=mode))
    return pictures
