"""ImageReward and HPSv2: the official packages' scoring (tests/ports/*_official.py in .venv-ports, one
official call per pair) against the project's plug-ins (batched at the config's evaluation.batch_size), on
the tiny models and the same prompts and PNG images. Each arm reads the PNGs inside its timing; loading
the model is outside it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from timing import REPO, Row, run_in_env, timed
from tiny_preset import build_models

from blindspot.models.spec import model_spec
from blindspot.plugins import load_metric

PORTS_PYTHON = ".venv-ports/bin/python"
PAIRS = 16
# The tolerances the ports tests assert (test_the_port_scores_as_the_official_package in
# tests/metrics/test_image_reward.py and tests/metrics/test_hpsv2.py). HPSv2's is on the cosine, the
# official package's unit.
IMAGE_REWARD_TOLERANCE = 1e-4
HPSV2_COSINE_TOLERANCE = 1e-5


def write_pairs(folder: Path) -> Path:
    """A pairs file for the official scripts: distinct prompts and random RGB PNGs of several sizes, none with
    a side of the tiny models' 32 pixels (hpsv2 skips its padding there and fails on a non-square image)."""
    rng = np.random.default_rng(0)
    prompts = [f"a penguin on a rock with exactly {i % 4 + 1} stones, picture {i}" for i in range(PAIRS)]
    paths = []
    for i in range(PAIRS):
        paths.append(str(folder / f"{i:02d}.png"))
        Image.fromarray(rng.integers(0, 255, (48 + 4 * i, 96 - 2 * i, 3), dtype=np.uint8)).save(paths[-1])
    pairs = folder / "pairs.json"
    pairs.write_text(json.dumps({"prompts": prompts, "images": paths}))
    return pairs


def our_arm(config: dict, metric_name: str, pairs: Path, repeats: int) -> tuple[float, list[float], Any]:
    """The plug-in of config's evaluation.metrics[metric_name], as the workflow loads it: median seconds,
    raw scores, and the metric."""
    entry = config["evaluation"]["metrics"][metric_name]
    spec = model_spec(config, entry["model"])
    batch_size = config["evaluation"]["batch_size"]
    metric = load_metric(entry["plugin"], spec, batch_size, config["resources_dir"], **entry.get("args", {}))
    listed = json.loads(pairs.read_text())
    seconds, scores = timed(lambda: metric.score(listed["prompts"], [Image.open(p) for p in listed["images"]]), repeats)
    return seconds, [score.raw for score in scores], metric


def official_arm(script: str, script_args: list[str], pairs: Path, repeats: int) -> tuple[float, list[float]]:
    """tests/ports/`script` in .venv-ports, timing its own scoring loop: median seconds and scores."""
    out = pairs.with_name(f"{Path(script).stem}.json")
    result = run_in_env(
        PORTS_PYTHON, REPO / "tests" / "ports" / script, *script_args, str(pairs), str(out), "--repeats", str(repeats)
    )
    return result["seconds"], result["scores"]


def row(what: str, peer: str, peer_arm: tuple, ours_arm: tuple, tolerance: float, unit: str) -> Row:
    (peer_seconds, peer_scores), (ours_seconds, ours_scores) = peer_arm, ours_arm
    difference = max(abs(a - b) for a, b in zip(peer_scores, ours_scores, strict=True))
    return Row(
        what=what,
        peer=peer,
        peer_seconds=peer_seconds,
        ours_seconds=ours_seconds,
        agree=difference <= tolerance,
        detail=f"max |official - plug-in| {difference:.2g} {unit}, tolerance "
        f"{tolerance:g} (the ports tests'); official score range {min(peer_scores):.3g} to {max(peer_scores):.3g}",
    )


def compare(config: dict, repeats: int) -> list[Row]:
    metrics = config["evaluation"]["metrics"]
    image_reward, hpsv2 = metrics["imagereward"], metrics["hpsv2"]
    build_models(config, {image_reward["model"], hpsv2["model"]})
    with tempfile.TemporaryDirectory() as scratch:
        pairs = write_pairs(Path(scratch))

        seconds, scores, _ = our_arm(config, "imagereward", pairs, repeats)
        model_dir = model_spec(config, image_reward["model"]).path
        rows = [
            row(
                f"ImageReward, {PAIRS} pairs",
                "image-reward 1.5, .score per pair",
                official_arm("image_reward_official.py", ["score", model_dir], pairs, repeats),
                (seconds, scores),
                IMAGE_REWARD_TOLERANCE,
                "reward",
            )
        ]

        seconds, scores, metric = our_arm(config, "hpsv2", pairs, repeats)
        model_dir = model_spec(config, hpsv2["model"]).path
        architecture = str(Path(model_dir) / hpsv2["args"]["architecture"])
        cosines = [score / metric.scale for score in scores]  # the plug-in reports the cosine x scale
        rows.append(
            row(
                f"HPSv2, {PAIRS} pairs",
                "hpsv2 1.2.0 scoring steps per pair",
                official_arm("hpsv2_official.py", [model_dir, architecture], pairs, repeats),
                (seconds, cosines),
                HPSV2_COSINE_TOLERANCE,
                "cosine",
            )
        )
    return rows
