"""bench/gpu_t2i_throughput.py: the real-size architectures it renders with on a GPU are right, and its
timed loop writes each batch as the render stage does."""

import importlib.util

import numpy as np
import pytest
from helpers.workflow import REPO

spec = importlib.util.spec_from_file_location("gpu_t2i_throughput", REPO / "bench" / "gpu_t2i_throughput.py")
gpu_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_bench)


@pytest.mark.parametrize("name", sorted(gpu_bench.architectures()))
def test_real_size_architectures_build_with_their_published_sizes(name):
    import torch

    architecture = gpu_bench.architectures()[name]
    assert gpu_bench.transformer_parameters(architecture) == pytest.approx(
        architecture["transformer_parameters"], rel=0.02
    )
    with torch.device("meta"):
        pipeline = gpu_bench.build_pipeline(architecture)
    assert type(pipeline).__name__ == architecture["pipeline"]


def test_the_timed_loop_writes_each_batch_as_the_render_stage_does(built_config, tmp_path):
    from PIL import Image

    from blindspot.images import hash_sidecar
    from blindspot.models.spec import model_spec
    from blindspot.protobias.render import DiffusersRenderer, sha256_of

    renderer = DiffusersRenderer(model_spec(built_config, "tiny-flux"))
    made = []

    def run() -> list:
        made.append(renderer.render(["a penguin on a rock", "a penguin on an ice floe"], [1, 2]))
        return made[-1]

    assert gpu_bench.timed_calls(run, 2, 2) > 0
    assert len(made) == 2
    assert not list(tmp_path.iterdir())  # the pipeline alone writes nothing
    assert gpu_bench.timed_calls(run, 2, 2, tmp_path) > 0
    assert len(list(tmp_path.iterdir())) == 2 * 2 * 2  # each image and its sidecar
    for call, images in enumerate(made[2:]):
        for index, image in enumerate(images):
            path = tmp_path / f"{call}-{index}.png"
            assert np.array_equal(np.asarray(Image.open(path)), np.asarray(image))
            assert hash_sidecar(path).read_text().strip() == sha256_of(path)
