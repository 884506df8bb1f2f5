"""Rendering: a plain diffusers loop (one pipeline call per batch, `DiffusersRenderer.render`, which
is that call with one seeded generator per image; the images kept in memory) against
`render_images`' path (`render_triplets`: planning, content-addressed ids, resume checks, PNG writing
and sha256 sidecars), with one pipeline per model, the same descriptions, seeds and batches; the
ratio is the project's overhead. A third arm, the plain loop saving each image as a PNG as it comes
(what a user's own script does), shows how much of that overhead is the PNG encoding any loop that
keeps its images pays. The outputs agree when every PNG written holds exactly the plain loop's pixels."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from timing import Row, timed_arms
from tiny_preset import build_models

from blindspot.config import model_spec
from blindspot.protobias.render import DiffusersRenderer, plan_renders, render_triplets

TRIPLETS = 16  # 32 images: a job's fixed costs (planning, the writer thread, the progress bar) spread as over a shard
OVERHEAD_LIMIT = 0.05


def triplets() -> pd.DataFrame:
    return pd.DataFrame({
        "triplet_id": [f"t{i}" for i in range(TRIPLETS)],
        "correct_description": [f"a penguin on a rock with exactly {i % 4 + 1} stones" for i in range(TRIPLETS)],
        "adversarial_description": [f"a penguin on an ice floe beside {i % 3 + 2} fish" for i in range(TRIPLETS)],
    })  # fmt: skip


def compare(config: dict, repeats: int) -> list[Row]:
    rows, frame = [], triplets()
    batch_size, seed = config["image_stage"]["render_batch_size"], config["seed"]
    for name in config["image_stage"]["t2i_models"]:
        build_models(config, {name})
        spec = model_spec(config, name)
        renderer = DiffusersRenderer(spec)
        jobs = plan_renders(frame, spec, Path(tempfile.gettempdir()), 1, seed)  # the descriptions and seeds, in order

        def plain(folder: str | None = None, jobs=jobs, renderer=renderer) -> list:
            images = []
            for start in range(0, len(jobs), batch_size):
                batch = jobs[start : start + batch_size]
                made = renderer.render([job.description for job in batch], [job.seed for job in batch])
                if folder:
                    for number, image in enumerate(made, start):
                        image.save(Path(folder) / f"{number}.png")
                images += made
            return images

        with tempfile.TemporaryDirectory() as scratch:

            def plain_saving(scratch=scratch, plain=plain) -> list:
                return plain(tempfile.mkdtemp(dir=scratch))

            def ours(scratch=scratch, spec=spec, renderer=renderer) -> pd.DataFrame:
                fresh = tempfile.mkdtemp(dir=scratch)  # every image is rendered, none found on disk
                return render_triplets(frame, spec, fresh, 1, seed, batch_size, renderer)[0]

            (plain_seconds, expected), (saving_seconds, _), (ours_seconds, written) = timed_arms(
                [plain, plain_saving, ours], repeats
            )
            same = sum(
                np.array_equal(np.asarray(Image.open(path)), np.asarray(image))
                for path, image in zip(written["path"], expected, strict=True)
            )
        overhead = ours_seconds / plain_seconds - 1
        rows.append(Row(
            what=f"render {name} ({len(jobs)} images)", peer="plain diffusers pipeline loop",
            peer_seconds=plain_seconds, ours_seconds=ours_seconds, agree=same == len(jobs),
            detail=(
                f"{same}/{len(jobs)} PNGs hold the plain loop's pixels exactly; overhead {overhead:+.1%} "
                f"({'within' if overhead < OVERHEAD_LIMIT else 'NOT within'} the {OVERHEAD_LIMIT:.0%} goal); "
                f"the plain loop saving each PNG: {saving_seconds / plain_seconds - 1:+.1%}"
            ),
        ))  # fmt: skip
    return rows
