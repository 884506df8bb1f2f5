import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.workflow import REPO, spec_of, step_command
from PIL import Image

from blindspot import schemas
from blindspot.io import read_table, write_table
from blindspot.models.spec import model_spec
from blindspot.protobias.render import (
    ENCODE_PROMPT_OUTPUTS,
    DiffusersRenderer,
    check_image,
    image_seed,
    plan_renders,
    render_triplets,
    sha256_of,
)


def triplet_rows(n):
    return pd.DataFrame(
        {
            "triplet_id": [f"t{i}" for i in range(n)],
            "seed_id": [f"s{i}" for i in range(n)],
            "correct_description": [f"a penguin on a rock with exactly {i + 1} stones" for i in range(n)],
            "adversarial_description": [f"a robin on a rock with exactly {i + 2} stones" for i in range(n)],
        }
    )


def test_plan_pairs_corr_and_adv_on_one_seed(tiny_config, tmp_path):
    spec = model_spec(tiny_config, "tiny-flux")
    jobs = plan_renders(triplet_rows(2), spec, tmp_path, n_per_description=2, base_seed=7)
    assert len(jobs) == 2 * 2 * 2
    assert len({job.image_id for job in jobs}) == len(jobs)
    first = [job for job in jobs if job.triplet_id == "t0"]
    assert {job.role for job in first} == {"corr", "adv"}
    assert [job.seed for job in first if job.role == "corr"] == [job.seed for job in first if job.role == "adv"]
    assert first[0].seed == image_seed("t0", 0, 7) != image_seed("t0", 1, 7)


@pytest.mark.slow
@pytest.mark.parametrize("t2i", ["tiny-flux", "tiny-sd3", "tiny-sana"])
def test_every_architecture_renders_and_an_image_is_remade_alone_from_its_row(built_config, t2i, tmp_path):
    spec = model_spec(built_config, t2i)
    frame, counters = render_triplets(triplet_rows(2), spec, tmp_path / "a", 1, 7, batch_size=4)
    assert counters["rendered"] == counters["images"] == 4
    assert read_back_shapes(frame) == {(spec.render["height"], spec.render["width"], 3)}
    # One image, alone, from the seed in its row: the same picture as in the batch of four, up to
    # the float rounding that differs between batch sizes.
    row = frame.iloc[3]
    alone = np.asarray(DiffusersRenderer(spec).render([row["description"]], [int(row["seed"])])[0], dtype=int)
    batched = np.asarray(Image.open(row["path"]).convert("RGB"), dtype=int)
    assert np.abs(alone - batched).max() <= 2
    other_seed = np.asarray(Image.open(frame["path"][0]).convert("RGB"), dtype=int)
    assert np.abs(other_seed - batched).mean() > 5  # another seed is another image


@pytest.mark.slow
def test_components_load_in_the_dtypes_the_release_asks_and_render_with_the_rest(built_config, tmp_path):
    """Sana's fp16 release runs its VAE and Gemma encoder in bf16 (its model zoo's recipe): diffusers casts
    between the components."""
    import copy

    import torch

    config = copy.deepcopy(built_config)
    config["models"]["tiny-sana"]["render"]["component_dtypes"] = {"vae": "bfloat16", "text_encoder": "bfloat16"}
    spec = model_spec(config, "tiny-sana")
    renderer = DiffusersRenderer(spec)
    pipeline = renderer.pipeline
    assert (pipeline.vae.dtype, pipeline.text_encoder.dtype, pipeline.transformer.dtype) == (
        torch.bfloat16,
        torch.bfloat16,
        torch.float32,
    )
    frame, counters = render_triplets(triplet_rows(1), spec, tmp_path, 1, 7, batch_size=2, renderer=renderer)
    assert counters["rendered"] == 2
    assert read_back_shapes(frame) == {(spec.render["height"], spec.render["width"], 3)}
    config["models"]["tiny-sana"]["render"]["component_dtypes"] = {"unet": "bfloat16"}
    with pytest.raises(
        ValueError,
        match=r"^model 'tiny-sana': render.component_dtypes names 'unet', which is no "
        r"module of its SanaPipeline \(those are: text_encoder, transformer, vae\)$",
    ):
        DiffusersRenderer(model_spec(config, "tiny-sana"))


@pytest.mark.slow
@pytest.mark.parametrize(("t2i", "fuse"), [("tiny-flux", True), ("tiny-sd3", False), ("tiny-sana", False)])
def test_fused_projections_and_a_compiled_denoiser_render_the_same_pictures(built_config, t2i, fuse, tmp_path):
    """`render.fuse_qkv` (one matrix product for query, key and value: FLUX's, as the paper config asks) and
    `render.compile` (torch.compile, all three): the pixels of the plain pipeline, up to float rounding. Sana's
    attention has no projections to fuse, and diffusers 0.42's fused SD3 attention fails when it runs: asking is
    refused in one line for Sana, and the paper config does not ask for SD3."""
    import copy

    import torch

    config = copy.deepcopy(built_config)
    plain = DiffusersRenderer(model_spec(config, t2i)).render(["a penguin on a rock"], [7])[0]
    config["models"][t2i]["render"] |= {"fuse_qkv": fuse, "compile": True}
    renderer = DiffusersRenderer(model_spec(config, t2i))
    assert isinstance(renderer.pipeline.transformer, torch._dynamo.eval_frame.OptimizedModule)
    fused = any(getattr(module, "fused_projections", False) for module in renderer.pipeline.transformer.modules())
    assert fused == fuse
    fast = renderer.render(["a penguin on a rock"], [7])[0]
    assert np.abs(np.asarray(fast, dtype=int) - np.asarray(plain, dtype=int)).max() <= 2
    if t2i == "tiny-sana":
        config["models"][t2i]["render"]["fuse_qkv"] = True
        with pytest.raises(ValueError, match=r"^model 'tiny-sana': render.fuse_qkv, but diffusers' \w+ cannot fuse"):
            DiffusersRenderer(model_spec(config, t2i))


def encoder_inputs(renderer) -> dict[str, list[tuple]]:
    """Per text encoder of the renderer's pipeline, the token rows it is given from now on (a hook on the module)."""
    rows = {}
    for name, module in renderer.pipeline.components.items():
        if name.startswith("text_encoder"):
            rows[name] = []

            def given(module, args, kwargs, seen=rows[name]):
                seen.extend(tuple(row) for row in (args[0] if args else kwargs["input_ids"]).tolist())

            module.register_forward_pre_hook(given, with_kwargs=True)
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("t2i", ["tiny-flux", "tiny-sd3", "tiny-sana"])
def test_each_description_is_encoded_once_for_all_its_seeds_and_renders_the_pixels_of_a_prompt_per_image(
    built_config, t2i, tmp_path, monkeypatch
):
    """Two seeds per description in batches of three: a description's seeds cross a batch's end, and a batch holds
    two seeds of one description and one of another. Each text encoder is given each description once (and Sana's
    guidance its negative prompt once); the pixels are those of the pipeline given one prompt per image, as a
    pipeline whose `encode_prompt` blindspot does not know is, up to float rounding."""
    spec = model_spec(built_config, t2i)
    renderer = DiffusersRenderer(spec)
    encoded = encoder_inputs(renderer)
    once, _ = render_triplets(triplet_rows(3), spec, tmp_path / "once", 2, 7, batch_size=3, renderer=renderer)
    assert (len(once), once["description"].nunique()) == (12, 6)
    negative = spec.render["guidance"] > 1
    assert {name: len(set(rows)) for name, rows in encoded.items()} == dict.fromkeys(encoded, 6 + negative)
    assert all(len(rows) == len(set(rows)) for rows in encoded.values())  # none twice

    monkeypatch.delitem(ENCODE_PROMPT_OUTPUTS, spec.pipeline)
    renderer = DiffusersRenderer(spec)
    encoded = encoder_inputs(renderer)
    per_image, _ = render_triplets(triplet_rows(3), spec, tmp_path / "each", 2, 7, batch_size=3, renderer=renderer)
    assert {name: len(rows) for name, rows in encoded.items()} == dict.fromkeys(encoded, 12 * (1 + negative))
    for ours, theirs in zip(once["path"], per_image["path"], strict=True):
        ours, theirs = (np.asarray(Image.open(path).convert("RGB"), dtype=int) for path in (ours, theirs))
        assert np.abs(ours - theirs).max() <= 2


def read_back_shapes(frame):
    return {np.asarray(Image.open(path)).shape for path in frame["path"]}


@pytest.mark.slow
def test_same_config_and_seeds_give_the_same_hashes(built_config, tmp_path):
    spec = model_spec(built_config, "tiny-sd3")
    first, _ = render_triplets(triplet_rows(2), spec, tmp_path / "a", 1, 7, batch_size=2)
    second, _ = render_triplets(triplet_rows(2), spec, tmp_path / "b", 1, 7, batch_size=2)
    assert list(first["sha256"]) == list(second["sha256"])
    other_seed, _ = render_triplets(triplet_rows(2), spec, tmp_path / "c", 1, 8, batch_size=2)
    assert set(other_seed["sha256"]).isdisjoint(first["sha256"])


@pytest.mark.slow
def test_a_corrupt_image_is_detected_rerendered_and_counted(built_config, tmp_path):
    spec = model_spec(built_config, "tiny-flux")
    first, _ = render_triplets(triplet_rows(2), spec, tmp_path, 1, 7, batch_size=4)
    truncated = Path(first["path"][1])
    original = np.asarray(Image.open(truncated).convert("RGB"), dtype=int)
    with open(truncated, "r+b") as handle:
        handle.truncate(100)
    assert check_image(truncated) == "corrupt"
    finished = {Path(path): Path(path).stat().st_mtime_ns for path in first["path"] if Path(path) != truncated}
    again, counters = render_triplets(triplet_rows(2), spec, tmp_path, 1, 7, batch_size=4)
    # The model makes the corrupt image's whole batch again: four images of work.
    assert counters == counters | {"reused": 3, "rendered": 1, "corrupt_rerendered": 1, "computed_items": 4}
    assert check_image(truncated) == "ok"
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in finished.items())  # not written again
    # re-rendered in the batch of four it was first rendered in: the same bytes
    assert again.equals(first)
    # the hashes recorded (from the sidecars of the images found, from memory for the one written) are the files'
    assert list(again["sha256"]) == [sha256_of(Path(path)) for path in again["path"]]
    assert np.array_equal(np.asarray(Image.open(truncated).convert("RGB"), dtype=int), original)


@pytest.mark.slow
def test_a_killed_render_resumes_without_redoing_finished_images(built_config, tmp_path):
    config = built_config  # in batches of 2, killed after 3 images: most likely in the middle of the second batch
    triplets = triplet_rows(4).assign(
        domain="animals",
        generator="g",
        subcategory="s",
        label="bird",
        qualifier="",
        correct_instance="penguin",
        adversarial_instance="robin",
        scene="x",
        aux_element="stone",
        knob="count",
        correct_value="1",
        adversarial_value="2",
        neutral_prompt="a bird",
        generator_model_id="m",
        generate_template_version="v",
        judges="j",
        added_entries="",
    )
    write_table(tmp_path / "triplets.parquet", triplets[schemas.TRIPLETS.names], schemas.TRIPLETS)
    seeds = pd.DataFrame({name: ["x"] * 4 for name in schemas.SEEDS.names}).assign(
        seed_id=triplets["seed_id"], sample_seed=0
    )
    write_table(tmp_path / "seeds.parquet", seeds, schemas.SEEDS)

    def command(run):
        (tmp_path / run).mkdir(exist_ok=True)
        return [
            sys.executable,
            *step_command(
                tmp_path / run,
                "render_images",
                domain="animals",
                t2i="tiny-sana",
                shard="00000",
                triplets=str(tmp_path / "triplets.parquet"),
                seeds=str(tmp_path / "seeds.parquet"),
                images_dir=str(tmp_path / run / "images"),
                out=str(tmp_path / run / "renders.parquet"),
                counters_out=str(tmp_path / run / "counters.json"),
                model=spec_of(config, "tiny-sana"),
                images_per_description=config["image_stage"]["images_per_description"],
                seed=config["seed"],
                batch_size=2,
                shard_size=8,
            ),
        ]

    subprocess.run(command("whole"), cwd=REPO, check=True, capture_output=True)
    proc = subprocess.Popen(command("killed"), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    images = tmp_path / "killed" / "images"
    deadline = time.monotonic() + 300
    while len(list(images.glob("*.sha256"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {p.stem: p.stat().st_mtime_ns for p in images.glob("*.png") if p.with_suffix(".sha256").exists()}
    assert 3 <= len(finished) < 8
    assert not (tmp_path / "killed" / "renders.parquet").exists()

    subprocess.run(command("killed"), cwd=REPO, check=True, capture_output=True)
    counters = json.loads((tmp_path / "killed" / "counters.json").read_text())
    assert counters["reused"] >= len(finished)
    assert counters["rendered"] == 8 - counters["reused"]
    for stem, mtime in finished.items():
        assert (images / f"{stem}.png").stat().st_mtime_ns == mtime  # not rendered again
    whole = read_table(tmp_path / "whole" / "renders.parquet", schemas.RENDERS).drop(columns="path")
    resumed = read_table(tmp_path / "killed" / "renders.parquet", schemas.RENDERS).drop(columns="path")
    assert resumed.equals(whole)
