"""HPSv2 through open_clip, on a tiny open_clip model of its architecture with random weights, and
(marker `ports`) equality with the official hpsv2 package run in .venv-ports."""

import math
import shutil

import numpy as np
import pytest
from helpers.metric_checks import official_scores
from PIL import Image

from blindspot.metrics.hpsv2 import HUB_CHECKPOINT, HPSv2
from blindspot.models.checkpoints import find_checkpoint
from blindspot.models.spec import ModelSpec
from blindspot.tiny.hpsv2 import CHECKPOINT_FILE, CONFIG_FILE, build_random_hpsv2

PROMPTS = ["a red fox in the snow", "two cats asleep on a blue sofa", "a lighthouse at dusk", "a bowl of green apples"]


def images(n: int) -> list[Image.Image]:
    """Random pictures, portrait and landscape, larger and smaller than the model's 32 pixels."""
    rng = np.random.default_rng(0)
    shapes = [(64 + 8 * i, 48 - 10 * i, 3) for i in range(n)]
    return [Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8)) for shape in shapes]


def spec(path) -> ModelSpec:
    return ModelSpec(name="tiny-hpsv2", backend="open_clip", gpus=0, dtype="float32", path=str(path), built=True)


@pytest.fixture(scope="module")
def tiny_hpsv2(tmp_path_factory):
    out = tmp_path_factory.mktemp("models") / "tiny-hpsv2"
    build_random_hpsv2(out, {"recipe": "random_open_clip"}, seed=0)
    return out


@pytest.mark.slow
def test_hpsv2_is_100_times_open_clips_own_cosine_per_pair(tiny_hpsv2):
    import open_clip
    import torch

    metric = HPSv2(spec(tiny_hpsv2), batch_size=3, architecture=CONFIG_FILE)
    assert metric.bounds == (-100.0, 100.0)
    pictures = images(4)
    scores = [s.raw for s in metric.score(PROMPTS, pictures)]
    assert all(math.isfinite(s) for s in scores)
    # open_clip's own loading of the same checkpoint, and its own encoders.
    model = open_clip.create_model(metric.architecture, pretrained=str(tiny_hpsv2 / CHECKPOINT_FILE))
    tokenizer = open_clip.get_tokenizer(metric.architecture)
    model.eval()
    for prompt, picture, score in zip(PROMPTS, pictures, scores, strict=True):
        with torch.no_grad():
            image = model.encode_image(metric.preprocess([picture]))
            text = model.encode_text(tokenizer([prompt]))
        assert score == pytest.approx(100 * torch.cosine_similarity(image, text).item(), abs=1e-4)
    alone = [metric.score([p], [i])[0].raw for p, i in zip(PROMPTS, pictures, strict=True)]
    assert alone == pytest.approx(scores, abs=1e-4)  # batching does not change a pair's score
    other = [s.raw for s in metric.score(PROMPTS[::-1], pictures)]
    assert other != pytest.approx(scores, abs=1e-4)  # the prompt matters, pair by pair
    unscaled = HPSv2(spec(tiny_hpsv2), batch_size=4, architecture=CONFIG_FILE, scale=1.0)  # hpsv2.score()'s cosine
    assert [s.raw for s in unscaled.score(PROMPTS, pictures)] == pytest.approx([s / 100 for s in scores], abs=1e-6)
    assert unscaled.bounds == (-1.0, 1.0)


@pytest.mark.slow
def test_hpsv2_letterboxes_like_the_official_val_transform(tiny_hpsv2):
    """hpsv2's `light_augmentation=True`: longest side to the model's size, black padding, no crop."""
    import torch

    metric = HPSv2(spec(tiny_hpsv2), batch_size=1, architecture=CONFIG_FILE)
    white = Image.new("RGB", (64, 32), (255, 255, 255))  # wide: padded above and below
    pixels = metric.preprocess([white])[0]
    assert tuple(pixels.shape) == (3, 32, 32)
    mean, std = np.array(metric.image_mean), np.array(metric.image_std)
    np.testing.assert_allclose(pixels[:, 0, 0].numpy(), -mean / std, atol=1e-5)  # black padding
    np.testing.assert_allclose(pixels[:, 16, 16].numpy(), (1 - mean) / std, atol=1e-5)  # the image, uncropped
    np.testing.assert_allclose(pixels[:, 16, 0].numpy(), (1 - mean) / std, atol=1e-5)
    tall = metric.preprocess([Image.new("RGB", (10, 32), (255, 255, 255))])[0]  # already 32 high: padded, not resized
    assert tuple(tall.shape) == (3, 32, 32)
    np.testing.assert_allclose(tall[:, 5, 10].numpy(), -mean / std, atol=1e-5)
    np.testing.assert_allclose(tall[:, 5, 11].numpy(), (1 - mean) / std, atol=1e-5)
    # a batch letterboxes its images of one size together, each as it would be alone
    mixed = [*images(2), white, Image.new("RGB", (10, 32), (255, 255, 255)), *images(2)]
    alone = torch.cat([metric.preprocess([image]) for image in mixed])
    np.testing.assert_array_equal(metric.preprocess(mixed).numpy(), alone.numpy())


@pytest.mark.slow
def test_a_checkpoint_with_a_missing_key_is_refused_by_name(tiny_hpsv2, tmp_path):
    import torch

    broken = tmp_path / "broken"
    shutil.copytree(tiny_hpsv2, broken)
    checkpoint = torch.load(broken / CHECKPOINT_FILE, weights_only=True)
    del checkpoint["state_dict"]["text_projection"]
    torch.save(checkpoint, broken / CHECKPOINT_FILE)
    with pytest.raises(ValueError, match=r"does not fit open_clip architecture .*1 missing key\(s\): text_projection"):
        HPSv2(spec(broken), batch_size=1, architecture=CONFIG_FILE)


def test_the_checkpoint_is_the_one_file_in_the_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"HPSv2 model folder .* exactly one checkpoint file"):
        find_checkpoint("HPSv2", tmp_path, None, HUB_CHECKPOINT)
    (tmp_path / "a.pt").write_bytes(b"")
    assert find_checkpoint("HPSv2", tmp_path, None, HUB_CHECKPOINT) == tmp_path / "a.pt"
    assert find_checkpoint("HPSv2", tmp_path / "a.pt", None, HUB_CHECKPOINT) == tmp_path / "a.pt"
    (tmp_path / "b.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"several \(a.pt, b.safetensors\)"):
        find_checkpoint("HPSv2", tmp_path, None, HUB_CHECKPOINT)


@pytest.mark.ports
@pytest.mark.slow
def test_the_port_scores_as_the_official_package(tiny_hpsv2, tmp_path):
    """hpsv2 1.2.0's own scoring steps, one pair at a time, on the same checkpoint and the same PNG
    images, give the plug-in's batched cosines within 1e-5."""
    official, reloaded = official_scores(
        "hpsv2_official.py", [str(tiny_hpsv2), str(tiny_hpsv2 / CONFIG_FILE)], PROMPTS, images(len(PROMPTS)), tmp_path
    )

    metric = HPSv2(spec(tiny_hpsv2), batch_size=4, architecture=CONFIG_FILE, scale=1.0)
    ours = [s.raw for s in metric.score(PROMPTS, reloaded)]
    assert ours == pytest.approx(official, abs=1e-5)
    assert max(official) - min(official) > 1e-2  # the pairs differ, so equality means something
