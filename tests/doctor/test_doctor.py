"""`blindspot doctor`: the preflight against the tiny preset with its models built, against a hub cache
laid out by the tests (tests/helpers/hub_cache.py), an API endpoint on 127.0.0.1, profiles with and without
conda, and, on the local SLURM test cluster, canary jobs that report the GPUs they see."""

import copy
import json
import os
import re
import shutil
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from helpers.hub_cache import (
    COMMIT,
    OPEN_TOKEN,
    OTHER_COMMIT,
    FakeHub,
    clear_token,
    lay_out,
    transformers_repo,
    with_hub_models,
)
from helpers.workflow import REPO

from blindspot.cli import main
from blindspot.doctor import models as doctor_models
from blindspot.doctor import report as doctor_report
from blindspot.doctor import run as doctor
from blindspot.doctor import system as doctor_system
from blindspot.doctor.report import FAIL, OK, WARN, Check
from blindspot.hub import repos as hub

API_KEY = "sk-doctor-secret-value"


def by_subject(checks: list[Check], check: str) -> dict[str, Check]:
    return {c.subject: c for c in checks if c.check == check}


class ApiServer:
    """An OpenAI-compatible endpoint's /models on 127.0.0.1: 200 with API_KEY, 401 without. `paths` are
    the paths it was asked for."""

    def __enter__(self):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.server.paths.append(self.path)
                allowed = self.path == "/v1/models" and self.headers.get("Authorization") == f"Bearer {API_KEY}"
                body = json.dumps({"data": []} if allowed else {"error": "invalid key"}).encode()
                self.send_response(200 if allowed else 401)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.paths = []
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config_for_run(config: dict, tmp_path: Path, endpoint: str) -> dict:
    """The tiny config with its results in `tmp_path` and the API judge at `endpoint` (not the `tiny_run` fixture)."""
    config = copy.deepcopy(config)
    config["results_dir"] = str(tmp_path / "results")
    config["models"]["local-api-judge"]["endpoint"] = endpoint
    return config


@pytest.mark.slow
def test_the_tiny_preset_passes_with_its_models_built_and_its_api_judge_served(built_config, tmp_path, monkeypatch):
    monkeypatch.setenv("BLINDSPOT_TINY_API_KEY", API_KEY)
    with ApiServer() as api:
        checks = doctor.run_checks(config_for_run(built_config, tmp_path, api.endpoint), cache_dir=tmp_path / "hub")
    assert not doctor_report.failed(checks), doctor_report.render(checks)
    models = by_subject(checks, "model")
    assert set(models) == set(hub.used_models(built_config)) - {"local-api-judge"}
    assert all(c.reason.startswith("built in ") for c in models.values())
    assert by_subject(checks, "api endpoint")["local-api-judge"].reason == f"{api.endpoint} answers (HTTP 200)"
    (disk,) = [c for c in checks if c.check == "disk"]  # nothing to fetch: only the results folder
    assert disk.verdict == OK
    assert "144 images at 96x96" in disk.reason
    table = doctor_report.render(checks)
    assert table.splitlines()[0].split() == ["check", "subject", "verdict", "reason"]
    assert table.endswith(f"0 failed, 0 warnings, {len(checks)} ok\n")
    assert API_KEY not in table


def test_models_of_the_tiny_preset_not_yet_built_will_be_and_a_missing_archive_fails(tiny_config, tmp_path):
    config = copy.deepcopy(tiny_config)
    config["resources_dir"] = str(tmp_path / "resources")
    config["models"]["niqe"]["build"]["archive"] = str(tmp_path / "basicsr.tar.gz")
    models = by_subject(doctor_models.model_checks(config, tmp_path / "hub", "http://127.0.0.1:9"), "model")
    assert models["tiny-flux"] == Check(
        "model", "tiny-flux", OK, "will be built by build_model (random_diffusers_pipeline)"
    )
    assert models["niqe"].verdict == FAIL
    assert models["niqe"].reason == f"to be built, but its recipe's archive {tmp_path / 'basicsr.tar.gz'} is missing"


def hub_run(tiny_config):
    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    return with_hub_models(
        tiny_config,
        {
            "minilm-l6": {"id": "org/pinned", "revision": COMMIT, "backend": "sentence_transformers"},
            "tiny-deberta-v2-nli": {"id": "org/moved", "revision": COMMIT},
            "tiny-qwen2": {"id": "org/absent"},
            "smollm2-135m": {"id": "org/branch"},
            "tiny-clip": {"id": "org/interrupted"},
        },
    ), shards


def test_hub_models_present_at_their_revision_elsewhere_absent_or_incomplete_offline(tiny_config, tmp_path):
    config, shards = hub_run(tiny_config)
    cache = tmp_path / "hub"
    repo = transformers_repo(2)
    lay_out(cache, "org/pinned", {"config.json": b"{}", "model.safetensors": b"w"}, ref=None)
    lay_out(cache, "org/moved", {"config.json": b"{}", "model.safetensors": b"w"}, commit=OTHER_COMMIT)
    lay_out(cache, "org/branch", repo)  # refs/main -> COMMIT
    lay_out(cache, "org/interrupted", {path: content for path, content in repo.items() if path != shards[1]})
    models = by_subject(doctor_models.model_checks(config, cache, "http://127.0.0.1:9"), "model")  # HF_HUB_OFFLINE=1
    assert models["minilm-l6"].verdict == OK
    assert models["minilm-l6"].reason == f"in the hub cache: org/pinned@{COMMIT} ({COMMIT[:12]})"
    assert models["smollm2-135m"].reason == f"in the hub cache: org/branch@main ({COMMIT[:12]})"
    offline = "and HF_HUB_OFFLINE is set: run `blindspot fetch-models` where the hub answers"
    assert models["tiny-deberta-v2-nli"] == Check(
        "model",
        "tiny-deberta-v2-nli",
        FAIL,
        f"org/moved@{COMMIT} is not in the hub cache, only {OTHER_COMMIT[:12]}, {offline}",
    )
    assert models["tiny-qwen2"].reason == f"org/absent@main is not in the hub cache, {offline}"
    assert models["tiny-clip"].verdict == FAIL
    assert models["tiny-clip"].reason.startswith(
        f"org/interrupted@main is incomplete in the hub cache (lacks {shards[1]})"
    )


def test_an_absent_model_would_be_fetched_when_the_hub_answers(tiny_config, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    config = with_hub_models(tiny_config, {"tiny-qwen2": {"id": "org/llm", "weights_gb": 2.5}})
    with FakeHub({"org/llm": transformers_repo()}) as fake:
        checks = doctor.run_checks(
            config_for_run(config, tmp_path, "http://127.0.0.1:9/v1"),
            cache_dir=tmp_path / "hub",
            endpoint=fake.endpoint,
        )
    assert by_subject(checks, "model")["tiny-qwen2"] == Check(
        "model", "tiny-qwen2", WARN, "org/llm@main is not in the hub cache; `blindspot fetch-models` would fetch it"
    )
    cache_disk = by_subject(checks, "disk")["hub cache"]
    assert cache_disk.verdict == OK
    assert "the 1 models to fetch take ~2.5 GB" in cache_disk.reason


def test_a_gated_model_needs_a_token_that_opens_it_unless_it_is_cached(tiny_config, tmp_path, monkeypatch):
    from huggingface_hub import constants

    clear_token(monkeypatch, tmp_path)
    config = with_hub_models(
        tiny_config,
        {"tiny-qwen2": {"id": "org/gated", "gated": True}, "smollm2-135m": {"id": "org/gated-cached", "gated": True}},
    )
    cache = tmp_path / "hub"
    lay_out(cache, "org/gated-cached", {"config.json": b"{}", "model.safetensors": b"w"})
    tokens = by_subject(doctor_models.model_checks(config, cache, "https://hub.example"), "token")
    assert tokens["smollm2-135m"] == Check("token", "smollm2-135m", OK, "gated, and already in the hub cache")
    assert tokens["tiny-qwen2"].verdict == FAIL
    assert tokens["tiny-qwen2"].reason == (
        "org/gated is gated on the hub: accept its terms at https://hub.example/org/gated with your account, then "
        "set HF_TOKEN or run `hf auth login` (no token found)"
    )
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with FakeHub({"org/gated": transformers_repo()}, gated=("org/gated",)) as fake:
        monkeypatch.setenv("HF_TOKEN", "hf_without_access")
        refused = by_subject(doctor_models.model_checks(config, cache, fake.endpoint), "token")["tiny-qwen2"]
        assert refused.verdict == FAIL
        assert refused.reason == f"the token has no access: accept the terms at {fake.endpoint}/org/gated"
        monkeypatch.setenv("HF_TOKEN", OPEN_TOKEN)
        opened = by_subject(doctor_models.model_checks(config, cache, fake.endpoint), "token")["tiny-qwen2"]
        assert opened == Check("token", "tiny-qwen2", OK, "gated; the token opens it")


def test_an_api_vlm_without_its_key_is_a_warning_naming_what_is_skipped(paper_config, monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    checks = {check.subject: check for check in doctor_models.api_checks(paper_config) if check.check == "api key"}
    skipped = "$GEMINI_API_KEY is not set: its HumbleBench answers will be skipped (its endpoint is not probed)"
    assert checks["gemini-2.5-pro"] == Check("api key", "gemini-2.5-pro", WARN, skipped)


def test_an_api_metric_needs_its_key_and_an_endpoint_that_takes_it(tiny_config, tmp_path, monkeypatch):
    """Without its key the metric's jobs are skipped and the run goes on: a warning, and no probe of its
    endpoint. With a key, an endpoint that refuses it or does not answer fails the run's jobs: FAIL."""
    monkeypatch.delenv("BLINDSPOT_TINY_API_KEY", raising=False)
    with ApiServer() as api:
        missing = doctor_models.api_checks(config_for_run(tiny_config, tmp_path, api.endpoint))
        assert api.server.paths == []
        monkeypatch.setenv("BLINDSPOT_TINY_API_KEY", "sk-wrong")
        wrong = doctor_models.api_checks(config_for_run(tiny_config, tmp_path, api.endpoint))
    skipped = "$BLINDSPOT_TINY_API_KEY is not set: metric api-judge will be skipped (its endpoint is not probed)"
    assert missing == [Check("api key", "local-api-judge", WARN, skipped)]
    assert wrong[0] == Check("api key", "local-api-judge", OK, "$BLINDSPOT_TINY_API_KEY is set")
    refused = f"{api.endpoint} refused the key in $BLINDSPOT_TINY_API_KEY (HTTP 401)"
    assert wrong[1] == Check("api endpoint", "local-api-judge", FAIL, refused)
    monkeypatch.setenv("BLINDSPOT_TINY_API_KEY", API_KEY)
    endpoint = f"http://127.0.0.1:{closed_port()}/v1"
    unreachable = doctor_models.api_checks(config_for_run(tiny_config, tmp_path, endpoint))
    assert unreachable[1] == Check(
        "api endpoint", "local-api-judge", FAIL, f"{endpoint} does not answer (ConnectionError)"
    )
    assert API_KEY not in doctor_report.render(unreachable)


def test_a_conda_profile_needs_conda_on_path_and_its_envvars_set(tmp_path, monkeypatch):
    profile = {"software-deployment-method": "conda", "envvars": ["HF_HOME", "HF_HUB_OFFLINE"]}
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("HF_HOME", raising=False)
    checks = doctor_system.profile_checks(profile)
    assert [(c.check, c.subject, c.verdict) for c in checks] == [
        ("env", "HF_HOME", FAIL),
        ("env", "HF_HUB_OFFLINE", OK),
        ("conda", "conda", FAIL),
    ]
    assert checks[2].reason.startswith("`conda` is not on PATH, and the profile deploys conda envs")
    conda = tmp_path / "mamba"
    conda.write_text("#!/bin/sh\n")
    conda.chmod(0o755)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    checks = doctor_system.profile_checks(profile | {"conda-frontend": "mamba"})
    assert not doctor_report.failed(checks)
    assert checks[2] == Check("conda", "mamba", OK, f"{conda} (the profile deploys conda envs)")
    assert doctor_system.profile_checks({"software-deployment-method": ["apptainer"]}) == []


def test_the_disk_estimate_follows_the_plan_and_fails_without_room(paper_config, tmp_path, monkeypatch):
    total, how = doctor_system.planned_bytes(paper_config)
    per_description = paper_config["image_stage"]["images_per_description"]
    images = (
        sum(d["n_seeds"] for d in paper_config["domains"].values()) * 2 * 3 * 3 * per_description
    )  # 3 generators, 3 T2I models
    assert how.startswith(f"{images} images at 1024x1024 as PNG")
    assert total > 2 * images * 1024 * 1024 * doctor_system.PNG_BYTES_PER_PIXEL
    monkeypatch.setattr(doctor_system.shutil, "disk_usage", lambda path: SimpleNamespace(free=10**9))
    config = copy.deepcopy(paper_config) | {"results_dir": str(tmp_path / "results")}
    results = by_subject(doctor_system.disk_checks(config, tmp_path / "hub"), "disk")["results"]
    assert results.verdict == FAIL
    assert results.reason.startswith(f"1.0 GB free at {tmp_path}; the run writes up to ~")


def test_a_canary_reads_nvidia_smi_else_the_devices_slurm_made_visible():
    listed = (
        "CUDA_VISIBLE_DEVICES=0,1\nGPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\ndriver=550.54.15\n"
    )
    assert doctor_system.gpus_seen(listed) == (2, "NVIDIA H100 80GB HBM3 (driver 550.54.15)")
    assert doctor_system.gpus_seen("CUDA_VISIBLE_DEVICES=0,1,2\n") == (3, "no nvidia-smi; CUDA_VISIBLE_DEVICES=0,1,2")
    assert doctor_system.gpus_seen("CUDA_VISIBLE_DEVICES=\n") == (0, "no nvidia-smi; CUDA_VISIBLE_DEVICES=(unset)")
    assert doctor_system.gpus_seen("") == (0, "no nvidia-smi; CUDA_VISIBLE_DEVICES=(unset)")


def test_a_driver_too_old_for_the_pinned_torchs_cuda_fails_before_any_gpu_hour():
    """A job on such a node sees no GPU (docs/usage.md shows one); the canary's driver says so first."""
    assert doctor_system.driver_of("GPU 0: NVIDIA H100 (UUID: GPU-1)\ndriver=535.104.05\n") == "535.104.05"
    assert doctor_system.driver_too_old("535.104.05", "13.0") == (
        "driver 535.104.05 is older than torch's CUDA 13.0 needs (>= 580): "
        "every GPU job would fail at its first CUDA call"
    )
    assert doctor_system.driver_too_old("580.65.06", "13.0") is None
    assert doctor_system.driver_too_old("535.104.05", "12.8") is None
    assert doctor_system.driver_too_old("535.104.05", None) is None  # a CPU build of torch asks nothing of a driver


def test_a_canary_asks_with_the_profiles_partition_account_and_gpu_model(tmp_path):
    resources = {"slurm_partition": "gpu", "slurm_account": "proj", "gpu_model": "h100", "mem_mb": 8000}
    command = doctor_system.canary_command(2, resources, "canary", tmp_path / "out")
    assert command[:2] == ["sbatch", "--wait"]
    assert {"--gpus=h100:2", "--partition=gpu", "--account=proj", f"--output={tmp_path / 'out'}"} <= set(command)
    assert "--gpus=1" in doctor_system.canary_command(1, {}, "canary", tmp_path / "out")


def test_a_slurm_profile_without_sbatch_is_one_failed_line(tiny_config, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    config = copy.deepcopy(tiny_config)
    config["models"]["tiny-qwen2"]["gpus"] = 2
    assert doctor_system.canary_checks(config, REPO / "profiles" / "slurm" / "config.yaml", 5) == [
        Check("gpus", "canary", FAIL, "sbatch is not on PATH, and the profile's executor is slurm")
    ]


def test_the_command_prints_the_table_and_exits_1_on_a_failure_never_a_traceback(
    tiny_config, tmp_path, capsys, monkeypatch
):
    """The tiny preset's API judge is optional: without its key, a warning and exit 0; with a key and an
    endpoint that does not answer, a FAIL and exit 1."""
    monkeypatch.delenv("BLINDSPOT_TINY_API_KEY", raising=False)
    config = config_for_run(tiny_config, tmp_path, f"http://127.0.0.1:{closed_port()}/v1")
    config["resources_dir"] = str(tmp_path / "resources")
    archive = tmp_path / "basicsr.tar.gz"  # the niqe recipe's download, there as setup.sh leaves it
    archive.write_bytes(b"")
    config["models"]["niqe"]["build"]["archive"] = str(archive)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    assert main(["doctor", "--configfile", str(config_file)]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"^api key +local-api-judge +warn +\$BLINDSPOT_TINY_API_KEY is not set: metric api-judge will be "
        r"skipped",
        out,
        re.MULTILINE,
    )
    assert "api endpoint" not in out
    assert re.search(r"\n0 failed, 1 warnings, \d+ ok\n$", out)
    monkeypatch.setenv("BLINDSPOT_TINY_API_KEY", API_KEY)
    assert main(["doctor", "--configfile", str(config_file)]) == 1
    out = capsys.readouterr().out
    assert re.search(
        r"^api endpoint +local-api-judge +FAIL +http://127.0.0.1:\d+/v1 does not answer", out, re.MULTILINE
    )
    assert "Traceback" not in out
    with pytest.raises(SystemExit) as exit_info:
        main(["doctor", "--configfile", str(config_file), "--profile", str(tmp_path / "no-profile")])
    assert exit_info.value.code == 2
    assert f"profile {tmp_path / 'no-profile'}: no such folder, or no config.yaml in it" in capsys.readouterr().err
    profile = tmp_path / "bad-profile"
    profile.mkdir()
    for text, problem in (
        ("executor: [slurm\n", "line 2, column 1: not valid YAML"),
        ("- slurm\n", "holds a YAML list"),
    ):
        (profile / "config.yaml").write_text(text)
        with pytest.raises(SystemExit):
            main(["doctor", "--configfile", str(config_file), "--profile", str(profile)])
        last = capsys.readouterr().err.splitlines()[-1]
        assert last.startswith(f"blindspot: error: profile file {profile}/config.yaml")
        assert problem in last


@pytest.fixture
def slurm_cluster():
    """The local test cluster (tests/slurm/cluster.sh): the one running, or one started for the test."""
    if shutil.which("sinfo") and subprocess.run(["sinfo"], capture_output=True, check=False).returncode == 0:
        yield
        return
    if os.geteuid() != 0:
        pytest.fail("the SLURM tests start a local cluster as root; deselect them with -m 'not slurm'")
    script = REPO / "tests" / "slurm" / "cluster.sh"
    started = subprocess.run([script, "start"], capture_output=True, text=True, timeout=600)
    assert started.returncode == 0, started.stdout + started.stderr
    yield
    subprocess.run([script, "stop"], capture_output=True, timeout=120, check=True)


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.integration
def test_canary_jobs_report_the_gpus_slurm_gives_each_count(slurm_cluster, tiny_config, tmp_path):
    config = copy.deepcopy(tiny_config)
    config["results_dir"] = str(tmp_path / "results")
    # GPU counts 1 and 2, and 8, more than the test cluster's node has (4 fake GPUs)
    for name, gpus in {"smollm2-135m": 1, "tiny-qwen2": 2, "tiny-flux": 8}.items():
        config["models"][name]["gpus"] = gpus
    profile = tmp_path / "profile.yaml"
    partitions = REPO / "profiles" / "slurm" / "partitions.example.yaml"  # its `gpu` and `cpu` are the cluster's
    settings = {"executor": "slurm", "default-resources": {"mem_mb": 500}, "slurm-partition-config": str(partitions)}
    profile.write_text(yaml.safe_dump(settings))
    checks = by_subject(doctor_system.canary_checks(config, profile, 300), "gpus")
    jobs = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, check=True).stdout
    canaries = re.findall(rf"JobName=blindspot-canary-(\d)gpu-{os.getpid()} .*? Partition=(\w+)", jobs)
    # the plugin's pick; 8 GPUs fit no partition, so that canary goes to the cluster's default (and fails)
    assert sorted(canaries) == [("1", "gpu"), ("2", "gpu"), ("8", "main")]
    assert checks["1 GPU (generate_triplets)"].verdict == OK, checks
    assert checks["1 GPU (generate_triplets)"].reason.startswith("asked for 1, the job sees 1: no nvidia-smi; ")
    assert checks["2 GPUs (judge_triplets)"].reason.startswith("asked for 2, the job sees 2: ")
    assert checks["8 GPUs (render_images)"].verdict == FAIL
    assert checks["8 GPUs (render_images)"].reason.startswith("the canary job failed (sbatch exit 1): ")


def test_the_api_models_estimated_cost_above_the_budget_is_a_warning(paper_config):
    from blindspot import bill, plan
    from blindspot.doctor.report import OK, WARN

    assert doctor_models.budget_checks(paper_config) == []  # no budget, no check
    cost = bill.total_cost(plan.plan(paper_config)["bill"])
    [within] = doctor_models.budget_checks(paper_config | {"budget": cost + 1})
    [above] = doctor_models.budget_checks(paper_config | {"budget": cost / 2})
    assert within.verdict == OK
    assert above.verdict == WARN
    # GPT-5's 1,800 requests and the four proprietary VLMs' 22,832 each (the Original setting), with each price's date
    dates = "2025-06-17, 2025-08-07, 2025-09-23, 2025-10-15, 2025-12-17"
    assert above.reason == (
        f"the plan's estimate is {cost:,.2f} USD for 93,128 requests (prices read {dates}), "
        f"above the budget of {cost / 2:,.2f} USD (`budget`)"
    )
