"""bench/gpu_check.sh, the check to run first whenever a GPU is lent: its dry mode here (every model
built on the meta device at the paper's sizes), and its measurements run on a CPU with the tiny
preset's models in place of the real-size ones, so the code a GPU run depends on has run."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import yaml
from helpers.workflow import REPO

sys.path.insert(0, str(REPO / "bench"))  # gpu_check imports its sibling gpu_t2i_throughput
spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)

PUBLISHED_B = {
    "flux.1-schnell": 11.9,
    "sd-3.5-large-turbo": 8.1,
    "sana-1600m-1024px": 1.6,
    "qwen2.5-vl-7b-instruct": 8.29,
    "qwen3-vl-4b-instruct-hf": 4.44,
    "qwen2-7b-decoder": 7.62,
}


@pytest.mark.slow  # builds every model at its published size (on the meta device): 15 s on 2 cores
def test_the_dry_run_builds_every_model_at_its_published_size_and_says_what_it_would_measure(tmp_path):
    environment = os.environ | {"PYTHON": sys.executable, "OUT": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_check.sh"), "--dry"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["dry"] is True
    assert {row["section"] for row in report["rows"]} == set(gpu_check.SECTIONS)
    assert {row["model"]: row["parameters_b"] for row in report["rows"]} == pytest.approx(PUBLISHED_B, rel=0.02)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gpu_check on cpu (torch ")
    assert lines[0].endswith(", dry run:")
    assert lines[1] == "| section | model | parameters_b | measures |"
    assert len(lines) == 2 + 1 + len(PUBLISHED_B)


def test_without_a_gpu_the_real_run_stops_and_points_to_the_dry_one(tmp_path, capsys):
    if gpu_check_has_gpu():
        pytest.skip("this machine has a GPU")
    assert gpu_check.main(["--out", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err.strip() == "gpu_check: no GPU here; run it with --dry to see what it measures"


def gpu_check_has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def test_the_vlm_architectures_are_the_registrys_models():
    paper = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for name, architecture in gpu_check.VLMS.items():
        assert architecture["registry"] == name
        assert paper["models"][name]["dtype"] == "bfloat16"
        # bf16 weights: two bytes a parameter, as the registry's weights_gb says
        assert paper["models"][name]["weights_gb"] == pytest.approx(2 * architecture["parameters"] / 1e9, rel=0.05)


@pytest.mark.slow
def test_each_measurement_runs_through_the_projects_code_on_the_tiny_models(built_config, monkeypatch):
    """On a CPU, the tiny preset's FLUX and VLMs stand in for the real-size ones: each section's rows come
    back with their items, rates and, for the render path, its overhead."""
    import torch
    from diffusers import FluxPipeline
    from transformers import AutoConfig

    models = gpu_check.Path(built_config["resources_dir"]) / "models"
    tiny_flux = built_config["models"]["tiny-flux"]
    monkeypatch.setattr(
        gpu_check,
        "t2i_architectures",
        lambda: {"tiny-flux": {"pipeline": "FluxPipeline", "render": tiny_flux["render"]}},
    )
    # in bfloat16, as the check builds the real-size pipelines
    monkeypatch.setattr(
        gpu_check,
        "build_pipeline",
        lambda architecture: FluxPipeline.from_pretrained(models / "tiny-flux", dtype=torch.bfloat16),
    )
    monkeypatch.setattr(gpu_check, "ASSETS", models)
    tiny_pixels = {
        "tiny-qwen2.5-vl": {"min_pixels": 56 * 56, "max_pixels": 112 * 112},
        "tiny-qwen3-vl": {"min_pixels": 64 * 64, "max_pixels": 128 * 128},
    }
    vlms = {name: entry | {"pixels": tiny_pixels[entry["tiny"]]} for name, entry in gpu_check.VLMS.items()}
    monkeypatch.setattr(gpu_check, "VLMS", vlms)
    monkeypatch.setattr(
        gpu_check, "vlm_config", lambda name, tokens=None: AutoConfig.from_pretrained(models / vlms[name]["tiny"])
    )
    monkeypatch.setitem(gpu_check.PAPER["humblebench"], "batch_size", 2)
    monkeypatch.setitem(gpu_check.PAPER["protoscore"], "accumulation", 2)

    def rows(section):  # a section yields each model's rows as it finishes
        return [row for model_rows in section for row in model_rows]

    t2i = rows(gpu_check.t2i("cpu", images=4, rounds=1))
    assert [(row["model"], row["arm"], row["items"]) for row in t2i] == [
        ("tiny-flux", "plain diffusers loop", 4),
        ("tiny-flux", "render path", 4),
    ]
    # the overhead is of the seconds before they were rounded to the millisecond: within what that rounding allows
    plain, ours, ms = t2i[0]["seconds"], t2i[1]["seconds"], 0.0005
    assert (ours - ms) / (plain + ms) - 1 - 1e-4 <= t2i[1]["overhead"] <= (ours + ms) / (plain - ms) - 1 + 1e-4
    vlm = rows(gpu_check.vlm("cpu", items=3, rounds=1))
    assert [row["arm"] for row in vlm] == ["HumbleBench answers at 640x480", "VLM filter scores at 1024x1024"]
    assert all(row["items"] == 3 and row["items_per_second"] > 0 and row["load_s"] >= 0 for row in vlm)
    trained = rows(gpu_check.protoscore("cpu", steps=1))
    assert trained[0]["arm"] == "LoRA training, 2 pairs a step"
    assert trained[0]["steps"] == 1
    assert trained[0]["seconds"] > 0
    # the decoding arm on a tiny Qwen2: forced answers of the asked length, a few a call against all in one
    tiny_decoder = {"vocab_size": 100352, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
    tiny_decoder |= {"num_attention_heads": 4, "num_key_value_heads": 2}
    monkeypatch.setattr(gpu_check, "DECODER", gpu_check.DECODER | {"config": tiny_decoder})
    decoded = rows(gpu_check.decode("cpu", answers=6, answer_tokens=5, small_batch=2))
    assert [(row["arm"], row["items"], row["answer_tokens"]) for row in decoded] == [
        ("2 answers a call", 6, 5),
        ("6 answers in one call", 6, 5),
    ]
    assert decoded[1]["gain"] == pytest.approx(decoded[0]["seconds"] / decoded[1]["seconds"], rel=0.05)
    assert gpu_check.table(t2i + vlm + trained + decoded).count("\n") == 1 + 7
