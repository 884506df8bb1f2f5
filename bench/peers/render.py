"""Rendering: a plain diffusers loop (one pipeline call per batch, `DiffusersRenderer.render`, which
is that call with one seeded generator per image and each description encoded once; the images kept
in memory) against `render_images`' path (`render_triplets`: planning, content-addressed ids, resume
checks, PNG writing and sha256 sidecars), with one pipeline per model, the same descriptions, seeds
and batches; the ratio is the project's overhead. A third arm, the plain loop saving each image as a
PNG as it comes (what a user's own script does), shows how much of that overhead is the PNG encoding
any loop that keeps its images pays. The outputs agree when every PNG written holds exactly the plain
loop's pixels.

Overheads are judged on each arm's fastest of at least `ROUNDS` rounds (what `timeit` advises): on a
shared machine a round of these 1-second arms takes up to 40 % longer at random, that noise only ever
adds time, and it can add more to an arm that writes in the background, whose writer thread needs
the second core. The medians (the table's seconds) are given beside them.

Then the writes alone. First on two threads against one: Pillow leaves the GIL while it compresses a
PNG, and the file system's calls leave it too, so a second thread writes nearly as much again. Then
32 PNGs written by `BackgroundWrites` beside two stand-in models against the same writes in line,
between the batches, each against the model alone: a real model's shape (few large tensor
operations) and a tiny one's (many small ones, with Python between them). The writer takes the GIL
back after each of its calls outside it; a thread that runs Python must hand it over each time, which
costs a tiny model's thread nearly what the writes cost in line. The outputs agree when both arms
write the same bytes."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from timing import Row, overheads, timed_arms
from tiny_preset import build_models

from blindspot.images import BackgroundWrites
from blindspot.models.spec import model_spec
from blindspot.protobias.render import DiffusersRenderer, plan_renders, render_triplets, save_image

TRIPLETS = 16  # 32 images: a job's fixed costs (planning, the writer thread, the progress bar) spread as over a shard
OVERHEAD_LIMIT = 0.05
ROUNDS = 20  # a 5 % goal needs more rounds than the other comparisons' few: one round moves by up to 40 %
WRITE_BATCHES, WRITE_BATCH_SIZE = 8, 4  # 32 images of 96 px, as the tiny models render them


def triplets() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "triplet_id": [f"t{i}" for i in range(TRIPLETS)],
            "correct_description": [f"a penguin on a rock with exactly {i % 4 + 1} stones" for i in range(TRIPLETS)],
            "adversarial_description": [f"a penguin on an ice floe beside {i % 3 + 2} fish" for i in range(TRIPLETS)],
        }
    )


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

            plain_arm, saving_arm, ours_arm = timed_arms([plain, plain_saving, ours], max(repeats, ROUNDS))
            same = sum(
                np.array_equal(np.asarray(Image.open(path)), np.asarray(image))
                for path, image in zip(ours_arm.result["path"], plain_arm.result, strict=True)
            )
        overhead, median_overhead = overheads(ours_arm, plain_arm)
        saving_overhead, saving_median_overhead = overheads(saving_arm, plain_arm)
        rows.append(
            Row(
                what=f"render {name} ({len(jobs)} images)",
                peer="plain diffusers pipeline loop",
                peer_seconds=plain_arm.seconds,
                ours_seconds=ours_arm.seconds,
                agree=same == len(jobs),
                detail=(
                    f"{same}/{len(jobs)} PNGs hold the plain loop's pixels exactly; fastest of {len(plain_arm.rounds)} "
                    f"rounds against fastest: overhead {overhead:+.1%}, "
                    f"{'within' if overhead < OVERHEAD_LIMIT else 'NOT within'} the {OVERHEAD_LIMIT:.0%} goal "
                    f"(medians {median_overhead:+.1%}); the plain loop saving each PNG: {saving_overhead:+.1%} "
                    f"(medians {saving_median_overhead:+.1%})"
                ),
            )
        )
    return rows + writes_on_two_threads(repeats) + background_writes(repeats)


def write_images() -> list[Image.Image]:
    """One batch of the tiny models' images (96-px noise, as random weights render)."""
    noise = np.random.default_rng(0).integers(0, 256, (WRITE_BATCH_SIZE, 96, 96, 3), dtype=np.uint8)
    return [Image.fromarray(pixels) for pixels in noise]


def png_bytes(image: Image.Image, path: Path) -> bytes:
    """The encoding alone of `save_image`, called as it is (the path unused): the PNG in memory."""
    encoded = io.BytesIO()
    image.save(encoded, format="PNG")
    return encoded.getvalue()


def writes_on_two_threads(repeats: int) -> list[Row]:
    """The 32 images encoded, then written by `save_image`, on one thread against two: what of a
    write runs outside the GIL, beside another write."""
    images = write_images()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, write in {"PNG encodes": png_bytes, "save_image writes": save_image}.items():

            def on_threads(threads: int, write=write) -> list:
                folder = Path(tempfile.mkdtemp(dir=scratch))
                jobs = [
                    (image, folder / f"{batch}-{i}.png")
                    for batch in range(WRITE_BATCHES)
                    for i, image in enumerate(images)
                ]
                with ThreadPoolExecutor(threads) as pool:
                    return list(pool.map(write, *zip(*jobs, strict=True)))

            one, two = timed_arms([lambda: on_threads(1), lambda: on_threads(2)], max(repeats, ROUNDS))
            rows.append(
                Row(
                    what=f"32 {name} on two threads",
                    peer="the same on one thread",
                    peer_seconds=one.seconds,
                    ours_seconds=two.seconds,
                    agree=one.result == two.result,
                    detail=(
                        f"fastest of {len(one.rounds)} rounds: two threads {min(one.rounds) / min(two.rounds):.2f}x one"
                    ),
                )
            )
    return rows


def stand_in_models() -> dict[str, Callable[[], object]]:
    """One batch's work of two one-threaded models: a real model's shape (a few large matrix
    products) and a tiny one's (many small layers)."""
    import torch

    large, small, layer = torch.randn(768, 768), torch.randn(4, 64, 96), torch.nn.Linear(96, 96)

    def few_large_operations() -> None:
        for _ in range(12):
            large @ large

    def many_small_operations() -> None:
        hidden = small
        for _ in range(400):
            hidden = torch.nn.functional.gelu(layer(hidden)) * 0.5

    return {"few large operations": few_large_operations, "many small operations": many_small_operations}


def background_writes(repeats: int) -> list[Row]:
    import torch

    images = write_images()
    rows = []
    with tempfile.TemporaryDirectory() as scratch, torch.inference_mode():
        for model, batch_work in stand_in_models().items():

            def in_line(batch_work=batch_work) -> list[str]:
                folder = Path(tempfile.mkdtemp(dir=scratch))
                digests = []
                for batch in range(WRITE_BATCHES):
                    batch_work()
                    digests += [save_image(image, folder / f"{batch}-{i}.png") for i, image in enumerate(images)]
                return digests

            def background(batch_work=batch_work) -> list[str]:
                folder = Path(tempfile.mkdtemp(dir=scratch))
                with BackgroundWrites(limit=WRITE_BATCH_SIZE) as writes:
                    futures = []
                    for batch in range(WRITE_BATCHES):
                        batch_work()
                        futures += [
                            writes.submit(save_image, image, folder / f"{batch}-{i}.png")
                            for i, image in enumerate(images)
                        ]
                return [future.result() for future in futures]

            def model_alone(batch_work=batch_work) -> None:
                for _ in range(WRITE_BATCHES):
                    batch_work()

            alone, line, ours = timed_arms([model_alone, in_line, background], max(repeats, ROUNDS))
            line_overhead, line_median_overhead = overheads(line, alone)
            overhead, median_overhead = overheads(ours, alone)
            rows.append(
                Row(
                    what=f"32 PNG writes beside {model}",
                    peer="the same writes in line",
                    peer_seconds=line.seconds,
                    ours_seconds=ours.seconds,
                    agree=ours.result == line.result,
                    detail=(
                        f"the model alone {alone.seconds:.3f} s; "
                        f"fastest of {len(alone.rounds)} rounds against fastest, "
                        f"the writes add {line_overhead:+.1%} in line and {overhead:+.1%} in the background "
                        f"(medians {line_median_overhead:+.1%} and {median_overhead:+.1%})"
                    ),
                )
            )
    return rows
