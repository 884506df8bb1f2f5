"""A registry entry derived from a model's own files (`blindspot.models.derived`): its backend from its
architecture, its dtype, its weights' size and the GPUs they take; a model no backend here runs with images
is refused in one line naming its architecture."""

from pathlib import Path

import pytest
from transformers import CLIPConfig, LlamaConfig, Qwen2_5_VLConfig

from blindspot.config import ConfigError
from blindspot.models.derived import derived_entry, derived_name, gpus_for

H100 = {"job_resources": {"gpu_memory_gb": 80}}


def _sized(path: Path, gigabytes: float) -> None:
    """A weight file of that size (sparse: its bytes are not read)."""
    with path.open("wb") as file:
        file.truncate(int(gigabytes * 1e9))


def _model(folder: Path, config, *weights: tuple[str, float]) -> Path:
    folder.mkdir(parents=True)
    config.save_pretrained(folder)
    for name, gigabytes in weights:
        _sized(folder / name, gigabytes)
    return folder


def test_a_vlm_folder_gives_a_transformers_entry_with_its_dtype_size_and_gpus(tmp_path):
    config = Qwen2_5_VLConfig()
    config.dtype = "bfloat16"
    # Two formats of the same weights: one is counted.
    weights = [("model-00001-of-00002.safetensors", 50), ("model-00002-of-00002.safetensors", 17)]
    folder = _model(tmp_path / "My-VLM", config, *weights, ("pytorch_model.bin", 67))
    entry = derived_entry(str(folder), H100, tmp_path)
    assert entry == {"id": str(folder), "backend": "transformers", "gpus": 2, "weights_gb": 67.0, "dtype": "bfloat16"}


def test_gpus_hold_the_weights_in_half_of_each_gpu_a_power_of_two():
    # the paper config's own choices: 16.6 GB on one H100, Qwen2.5-VL-32B (67) and InternVL3-38B (77) on two
    assert [gpus_for(size, 80) for size in (0, 16.6, 40, 67, 77, 130, 470)] == [1, 1, 1, 2, 2, 4, 16]


def test_a_model_no_backend_runs_with_images_is_refused_naming_its_architecture(tmp_path):
    llama = LlamaConfig(architectures=["LlamaForCausalLM"])
    folder = _model(tmp_path / "llama", llama)
    with pytest.raises(ConfigError) as refused:
        derived_entry(str(folder), H100, tmp_path)
    assert str(refused.value) == (
        f"model {folder}, LlamaForCausalLM (model type llama): no backend here runs it with images (transformers: "
        "transformers' AutoModelForImageTextToText does not take model type llama (LlamaForCausalLM); "
        "vllm: vLLM is not installed here to read its registry)"
    )


def test_remote_code_is_for_a_registry_entry_to_allow(tmp_path):
    config = Qwen2_5_VLConfig(auto_map={"AutoModelForImageTextToText": "modeling_x.XForConditionalGeneration"})
    folder = _model(tmp_path / "remote", config)
    with pytest.raises(
        ConfigError, match=r"^model .*remote, .*: its config maps the repository's own code \(auto_map\)"
    ):
        derived_entry(str(folder), H100, tmp_path)


def test_a_plug_ins_own_model_is_read_by_the_plug_in(tmp_path):
    """A CLIP is no VLM that answers: a plug-in that does not declare it in `VLMS` reads it itself."""
    folder = _model(tmp_path / "clip", CLIPConfig(), ("model.safetensors", 0.6))
    entry = derived_entry(str(folder), H100, tmp_path, reads_images=False)
    assert (entry["backend"], entry["weights_gb"], entry["gpus"]) == ("transformers", 0.6, 1)
    with pytest.raises(ConfigError, match=r"model type clip.*no backend here runs it with images"):
        derived_entry(str(folder), H100, tmp_path)
    (tmp_path / "checkpoint").mkdir()
    _sized(tmp_path / "checkpoint" / "ImageReward.pt", 1.79)
    assert derived_entry(str(tmp_path / "checkpoint"), H100, tmp_path, reads_images=False)["weights_gb"] == 1.79
    with pytest.raises(ConfigError, match=r"checkpoint: no config.json, which transformers and vLLM read"):
        derived_entry(str(tmp_path / "checkpoint"), H100, tmp_path)


def test_a_hub_model_is_read_from_the_hub_cache_and_refused_in_one_line_where_it_is_not(tmp_path):
    cache = tmp_path / "hub"
    commit = "0" * 40
    repo = cache / "models--org--some-vlm"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    config = Qwen2_5_VLConfig()
    config.dtype = "float16"
    _model(repo / "snapshots" / commit, config, ("model.safetensors", 8.6))
    entry = derived_entry("org/some-vlm", H100, cache)
    assert entry == {"id": "org/some-vlm", "backend": "transformers", "gpus": 1, "weights_gb": 8.6, "dtype": "float16"}
    with pytest.raises(ConfigError) as refused:
        derived_entry("org/not-fetched", H100, cache)
    assert str(refused.value) == (
        f"model org/not-fetched: its config.json is not in the hub cache ({cache}) and the hub did not give it "
        "(HF_HUB_OFFLINE is set); fetch it first, or name its folder"
    )


def test_a_derived_name_is_the_folders_unless_the_registry_has_it():
    assert derived_name("/data/ckpt/My-VLM", {}) == "my-vlm"
    assert derived_name("Qwen/Qwen2.5-VL-7B-Instruct", {}) == "qwen2.5-vl-7b-instruct"
    assert derived_name("/data/ckpt/My-VLM", {"my-vlm": {}}) == "data-ckpt-my-vlm"


DERIVE_IN_VLLM = """
import json, sys
from blindspot.models.derived import derived_entry
print(json.dumps(derived_entry(sys.argv[1], {"job_resources": {"gpu_memory_gb": 80}}, sys.argv[2])))
"""


@pytest.mark.vllm
@pytest.mark.slow
def test_where_vllm_is_installed_its_registry_serves_what_transformers_does_not_load(tmp_path):
    """DeepSeek-VL2 (a vision part, no class in transformers): vLLM's own registry lists its architecture."""
    import json
    import subprocess

    from helpers.envs import VLLM_PYTHON

    folder = tmp_path / "deepseek-vl2-tiny"
    folder.mkdir()
    model = {
        "architectures": ["DeepseekVLV2ForCausalLM"],
        "model_type": "deepseek_vl_v2",
        "vision_config": {"model_name": "siglip_so400m_patch14_384"},
        "dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(model))
    _sized(folder / "model.safetensors", 6.8)
    run = subprocess.run(
        [str(VLLM_PYTHON), "-c", DERIVE_IN_VLLM, str(folder), str(tmp_path)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    entry = json.loads(next(line for line in reversed(run.stdout.splitlines()) if line.startswith("{")))
    assert entry == {"id": str(folder), "backend": "vllm", "gpus": 1, "weights_gb": 6.8, "dtype": "bfloat16"}
