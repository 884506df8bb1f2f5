"""One machine with several GPUs and no SLURM (profiles/workstation): each job takes device ids no
running job holds, by a lock the kernel releases when the job's process ends (blindspot.models.gpu_slots).
Tested with fake ids on a CPU: the ids a job is given are what it sets in CUDA_VISIBLE_DEVICES."""

import copy
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml
from helpers.workflow import REPO, copy_run, snakemake

from blindspot.doctor.report import FAIL, OK, WARN
from blindspot.doctor.system import workstation_checks
from blindspot.models import gpu_slots

HOLD = """
import sys, time
from blindspot.models.gpu_slots import claim_for_job
ids = claim_for_job(int(sys.argv[1]), sys.argv[2].split(","), None)
print(",".join(ids), flush=True)
time.sleep(600)
"""


@pytest.fixture
def locks(tmp_path, monkeypatch):
    folder = tmp_path / "locks"
    monkeypatch.setenv(gpu_slots.LOCK_DIR_VARIABLE, str(folder))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return folder


def holder(count: int, pool: str) -> tuple[subprocess.Popen, list[str]]:
    """A process that claims `count` GPUs of `pool` as a job does, and holds them until it is killed."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(count), pool], stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline().strip()
    assert line, f"the holder claimed nothing (exit {process.poll()})"
    return process, line.split(",")


def test_the_runs_cuda_visible_devices_wins_over_the_profiles_list(monkeypatch):
    assert gpu_slots.gpu_pool([0, 1, 2, 3], environ={}) == ["0", "1", "2", "3"]
    assert gpu_slots.gpu_pool([0, 1, 2, 3], environ={"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    monkeypatch.setattr(gpu_slots, "machine_gpus", lambda: ["0", "1"])
    assert gpu_slots.gpu_pool("auto", environ={}) == ["0", "1"]


def test_jobs_in_other_processes_get_ids_no_running_job_holds_and_a_kill_9_gives_them_back(locks):
    first, first_ids = holder(2, "0,1,2,3")
    second, second_ids = holder(2, "0,1,2,3")
    try:
        assert len(first_ids) == len(second_ids) == 2
        assert not set(first_ids) & set(second_ids)
        # All four are held: a third job waits, and gives up after its wait with one line.
        with pytest.raises(gpu_slots.NoFreeGPUs, match=r"no 1 of GPUs 0, 1, 2, 3 came free in 0 s"):
            gpu_slots.claim(1, ["0", "1", "2", "3"], wait_s=0)
        first.send_signal(signal.SIGKILL)  # nothing runs in the killed process: the kernel drops its locks
        first.wait(timeout=30)
        assert sorted(gpu_slots.claim(2, ["0", "1", "2", "3"], wait_s=5)) == sorted(first_ids)
    finally:
        for process in (first, second):
            process.kill()
            process.wait(timeout=30)


def test_a_job_takes_all_its_gpus_or_none(locks):
    process, held = holder(1, "0,1")
    try:
        with pytest.raises(gpu_slots.NoFreeGPUs):
            gpu_slots.claim(2, ["0", "1"], wait_s=0)
        # The free id was not kept by the failed claim: a one-GPU job still gets it.
        assert gpu_slots.claim(1, ["0", "1"], wait_s=0) == [gpu for gpu in ("0", "1") if gpu not in held]
    finally:
        process.kill()
        process.wait(timeout=30)


def test_a_job_asking_for_more_gpus_than_the_machine_has_stops_in_one_line(locks):
    with pytest.raises(gpu_slots.NoFreeGPUs, match=r"^a job asks for 3 GPU\(s\) and this machine has 2 \(0, 1\): "):
        gpu_slots.claim(3, ["0", "1"])


def test_under_slurm_or_without_the_profile_key_a_job_is_given_nothing(locks, monkeypatch):
    assert gpu_slots.claim_for_job(1, None) is None
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert gpu_slots.claim_for_job(1, [0, 1]) is None
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"


def test_a_cpu_job_sees_no_gpu_and_a_gpu_job_its_own(locks, monkeypatch, tmp_path):
    assert gpu_slots.claim_for_job(0, [0, 1]) == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    log = tmp_path / "job.log"
    assert gpu_slots.claim_for_job(1, [0, 1], str(log)) == ["0"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    assert re.fullmatch(r"blindspot: GPUs \[0\] held from \d+\.\d+ \(pid \d+\)\n", log.read_text())


def test_doctor_reports_the_gpus_and_whether_the_largest_job_fits(tiny_config, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = copy.deepcopy(tiny_config)
    config["models"]["tiny-qwen2.5-vl"] |= {"gpus": 2, "weights_gb": 30}
    profile = {"resources": {"gpu": 4}, "config": {"workstation_gpus": [0, 1, 2, 3]}}
    checks = {check.subject: check for check in workstation_checks(config, profile)}
    assert checks["workstation"].verdict == OK
    assert checks["workstation"].reason.startswith("4 GPU(s) for jobs (workstation_gpus: [0, 1, 2, 3]): 0, 1, 2, 3")
    assert checks["largest job"].verdict == OK
    assert checks["largest job"].reason.startswith("tiny-qwen2.5-vl (judge_images ")
    assert checks["largest job"].reason.endswith("): 2 GPU(s), 15.0 GB of weights on each (weights only)")
    assert "gpu count" not in checks
    # 80 GB cards hold it; 10 GB ones do not.
    monkeypatch.setattr("blindspot.doctor.system.gpu_memory", lambda: {str(i): ("Card", 10.0) for i in range(4)})
    assert {c.subject: c for c in workstation_checks(config, profile)}["largest job"].verdict == FAIL
    config["models"]["tiny-qwen2.5-vl"]["gpus"] = 5
    profile["resources"]["gpu"] = 8
    checks = {check.subject: check for check in workstation_checks(config, profile)}
    assert checks["gpu count"].verdict == WARN
    assert checks["largest job"].verdict == FAIL
    assert checks["largest job"].reason.endswith("asks for 5 GPUs; the machine has 4")
    assert workstation_checks(config, {"resources": {"gpu": 4}}) == []


def test_the_workstation_profile_is_the_local_one_with_gpus_of_their_own():
    local = yaml.safe_load((REPO / "profiles" / "local" / "config.yaml").read_text())
    workstation = yaml.safe_load((REPO / "profiles" / "workstation" / "config.yaml").read_text())
    assert workstation["config"] == {"workstation_gpus": "auto"}
    assert workstation["resources"]["gpu"] > 0
    assert {k: v for k, v in workstation.items() if k not in ("config", "resources")} == {
        k: v for k, v in local.items() if k != "resources"
    }


HELD = re.compile(r"blindspot: GPUs \[([\d,]*)\] held from ([\d.]+)")
RELEASED = re.compile(r"blindspot: GPUs \[[\d,]*\] released at ([\d.]+)")


@pytest.mark.slow
@pytest.mark.integration
def test_the_tiny_presets_gpu_jobs_on_four_fake_gpus_never_share_one(tiny_run, run_config, tmp_path, monkeypatch):
    """HumbleBench's answer jobs, their VLMs asking for one and two GPUs, on a workstation profile with
    four (fake) GPUs and room for three jobs at once: each job's log says which ids it held and when."""
    monkeypatch.setenv(gpu_slots.LOCK_DIR_VARIABLE, str(tmp_path / "locks"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    work = copy_run(tiny_run[0], tmp_path / "run")
    config = copy.deepcopy(run_config)
    config["models"]["tiny-qwen2.5-vl"]["gpus"] = 2
    config["models"]["tiny-internvl3"]["gpus"] = 1
    (work / "gpus.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    profile = yaml.safe_load((REPO / "profiles" / "workstation" / "config.yaml").read_text())
    profile |= {"cores": 4, "resources": {"gpu": 4}, "config": {"workstation_gpus": [0, 1, 2, 3]}}
    (work / "profiles" / "four_gpus").mkdir()
    (work / "profiles" / "four_gpus" / "config.yaml").write_text(yaml.safe_dump(profile))
    started = time.time()
    snakemake(
        "--profile",
        "profiles/four_gpus",
        "--configfile",
        "gpus.yaml",
        "--forcerun",
        "answer_humble",
        "--until",
        "answer_humble",
        cwd=work,
    )
    spans = []
    for log in (work / config["results_dir"]).rglob("logs/answer_humble/**/*.log"):
        text = log.read_text()
        held, released = HELD.findall(text), RELEASED.findall(text)
        if held and float(held[-1][1]) >= started:
            assert released, f"{log}: no release line"
            spans.append((log, [gpu for gpu in held[-1][0].split(",") if gpu], float(held[-1][1]), float(released[-1])))
    humble = config["humblebench"]
    jobs = len(humble["vlms"]) * humble["answer_shards"]
    assert len(spans) == jobs
    for log, ids, _, _ in spans:
        want = config["models"][log.parent.name]["gpus"]  # logs/answer_humble/<vlm>/<shard>
        assert len(ids) == want, (log, ids)  # a VLM asking for none sees none
        assert set(ids) <= {"0", "1", "2", "3"}, (log, ids)
    overlapping = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1 :] if a[2] < b[3] and b[2] < a[3]]
    assert overlapping, "no two jobs ran at the same time: the test proves nothing"
    for a, b in overlapping:
        assert not set(a[1]) & set(b[1]), f"{a[0]} and {b[0]} ran at the same time on GPUs {set(a[1]) & set(b[1])}"


def test_auto_reads_the_machines_gpus_and_their_memory_from_nvidia_smi(tmp_path, monkeypatch, tiny_config):
    """`workstation_gpus: auto` on a machine whose nvidia-smi lists two GPUs (a stand-in script on PATH
    that answers the queries as nvidia-smi does); and none where there is no nvidia-smi."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\ncase "$1" in\n  --query-gpu=index) printf "0\\n1\\n" ;;\n'
        '  --query-gpu=index,name,memory.total) printf "0, NVIDIA H100 80GB HBM3, 81559\\n1, NVIDIA H100 '
        '80GB HBM3, 81559\\n" ;;\n  *) exit 9 ;;\nesac\n'
    )
    fake.chmod(0o755)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    assert gpu_slots.gpu_pool("auto") == ["0", "1"]
    profile = {"resources": {"gpu": 2}, "config": {"workstation_gpus": "auto"}}
    checks = {check.subject: check for check in workstation_checks(tiny_config, profile)}
    assert checks["workstation"].reason == (
        "2 GPU(s) for jobs (workstation_gpus: auto): 0: NVIDIA H100 80GB HBM3 86 GB, 1: NVIDIA H100 80GB HBM3 86 GB"
    )
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu_slots.machine_gpus() == []
