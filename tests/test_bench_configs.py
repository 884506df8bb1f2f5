"""The real-size architectures that bench/gpu_t2i_throughput.py renders with on a GPU are right."""

import importlib.util

import pytest
from conftest import REPO

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
