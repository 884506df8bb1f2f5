"""The workflow on a real SLURM cluster: a one-node cluster on this machine (tests/slurm/cluster.sh)
with fake GPUs, driven by `snakemake --profile profiles/slurm` and by the submitit API.

What each job asked for, and the partition it ran in, is read back from SLURM's own records
(`scontrol show job`), not from Snakemake's plan. One workflow run serves most tests; a second, of one
small rule, shows a job killed for its memory coming back larger.
"""

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.workflow import REPO, local_rules

from blindspot import schemas
from blindspot.io import read_table
from blindspot.plan import job_table
from blindspot.slurm import submit_stage
from blindspot.targets import final_targets, path

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.integration]

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
# The profile's example partitions file: the test cluster has its `gpu` and `cpu` partitions.
PARTITIONS = REPO / "profiles" / "slurm" / "partitions.example.yaml"
# GPUs per model in the test run: several counts, so a job asking for the wrong model's GPUs shows.
TEST_GPUS = {
    "smollm2-135m": 1,
    "tiny-qwen2": 2,
    "tiny-flux": 1,
    "tiny-sd3": 2,
    "tiny-sana": 1,
    "tiny-qwen2.5-vl": 2,
    "tiny-internvl3": 1,
    "tiny-deberta-v2-nli": 1,
    "tiny-qwen3-vl": 1,
}


def cluster_gpu_model() -> str:
    """The model of the test cluster's GPUs, as its node offers them (`gpu:h100:4`)."""
    offered = subprocess.run(["sinfo", "-h", "-o", "%G"], capture_output=True, text=True, check=True).stdout
    return offered.strip().split(":")[1]


def cluster_profile(profile_dir, array_rules=()):
    """What a test cluster must change in profiles/slurm: no conda channels, no accounting daemon (so
    `squeue` for status and no account; the efficiency report, which needs sacct, only logs that it has
    none), and short jobs (so status checks start early); and the site settings the profile names: its
    GPU model, its partitions file (the example's partitions are the test cluster's) and the rules it
    submits as arrays. Memory, time and CPUs are the jobs' own (blindspot.resources, from the tiny
    config's `job_resources`)."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    del profile["software-deployment-method"]
    profile |= {
        "default-resources": {"gpu_model": cluster_gpu_model()},
        "slurm-partition-config": str(PARTITIONS),
        "slurm-status-command": "squeue",
        "slurm-no-account": True,
        "slurm-init-seconds-before-status-checks": 5,
        "seconds-between-status-checks": 5,
    }
    if array_rules:
        profile["slurm-array-jobs"] = ",".join(array_rules)
    profile_dir.mkdir()
    (profile_dir / "config.yaml").write_text(yaml.safe_dump(profile))
    return profile_dir


def one_request_rules(config) -> list[str]:
    """The rules that reach SLURM with several jobs that all ask for one request (GPUs, CPUs, memory and
    time): the only ones plugin 2.8 may submit as an array, whose every task gets the first job's request."""
    jobs = job_table(config)
    jobs = jobs[~jobs["rule"].isin(local_rules())]
    requests = jobs.groupby("rule")[["gpus", "threads", "mem_mb", "runtime"]].nunique()
    counts = jobs["rule"].value_counts()
    return sorted(rule for rule in requests.index if counts[rule] > 1 and (requests.loc[rule] == 1).all())


def run_snakemake(command: list[str], work: Path, environment: dict[str, str], timeout: int) -> str:
    """Run Snakemake on the test cluster; on a timeout, SIGINT (which makes Snakemake cancel its SLURM jobs)."""
    with subprocess.Popen(
        command, cwd=work, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as run:
        try:
            log, _ = run.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            run.send_signal(signal.SIGINT)
            log, _ = run.communicate(timeout=120)
            pytest.fail(f"snakemake on SLURM timed out:\n{log[-4000:]}")
    assert run.returncode == 0, log[-6000:]
    return log


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.fail("the SLURM tests start a local cluster as root; deselect them with -m 'not slurm'")
    started = subprocess.run([CLUSTER, "start"], capture_output=True, text=True, timeout=600)
    assert started.returncode == 0, started.stdout + started.stderr
    yield
    subprocess.run([CLUSTER, "stop"], capture_output=True, timeout=120, check=True)


def slurm_jobs() -> list[dict[str, str]]:
    """Every job SLURM still remembers (MinJobAge), as its `scontrol show job` fields."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, check=True).stdout
    return [dict(field.split("=", 1) for field in line.split() if "=" in field) for line in out.splitlines()]


def asks_for_memory(job: dict[str, str], mem_mb: int) -> bool:
    """Whether SLURM recorded the job's --mem as `mem_mb`: for a task of an array, `mem_mb` and the room the
    plugin adds to an array's --mem for its job step to decode the tasks' commands (3x their size, at least
    1 MB; `slurm-disable-memory-fudge` turns it off)."""
    asked = int(re.search(r"\bmem=(\d+)M", job["TRES"])[1])
    return mem_mb < asked <= mem_mb + 8 if "ArrayJobId" in job else asked == mem_mb


def requested_gpus(job: dict[str, str]) -> int:
    match = re.search(r"gres:gpu:(?:[\w.]+:)?(\d+)", job.get("TresPerJob", ""))
    return int(match[1]) if match else 0


@pytest.fixture(scope="module")
def slurm_run(cluster, built_config, tmp_path_factory):
    """The tiny preset's animals domain through `snakemake --profile` on the test cluster. The models
    come built: `build_model` is a local rule (the quick start's run tests it), and building them
    here would only keep the 2 cores from the SLURM jobs."""
    work = tmp_path_factory.mktemp("slurm-checkout")
    for part in ("workflow", "config", "src"):
        subprocess.run(["cp", "-a", str(REPO / part), str(work / part)], check=True)
    (work / "resources").mkdir()
    models = Path(built_config["resources_dir"]) / "models"
    subprocess.run(["cp", "-a", str(models), str(work / "resources" / "models")], check=True)
    (work / "resources" / "downloads").symlink_to(REPO / "resources" / "downloads")
    config = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    # One domain: the test machine has 2 cores. Absolute paths, so that submitit jobs find them too.
    config["domains"] = {"animals": config["domains"]["animals"]}
    # Its three kept seeds draw 0.77, 0.81 and 0.90 (`split.split_of`): at the preset's 0.5 all would be
    # train pairs, and Table 3 would have no test pair. 0.85 makes two of them test, one train (ProtoScore's).
    config["benchmark"]["test_fraction"] = 0.85
    # HumbleBench in one setting with one VLM: its jobs go through SLURM like the others.
    humble = config["humblebench"]
    humble |= {
        "vlms": humble["vlms"][:1],
        "settings": {"original": humble["settings"]["original"]},
        "tables": {"original": "original", "stress": "original"},
    }
    # Its answers in three shards: three jobs of one VLM, which ask for one request and so run as an array.
    humble["answer_shards"] = 3
    config |= {"results_dir": str(work / "results"), "resources_dir": str(work / "resources")}
    for name, gpus in TEST_GPUS.items():
        config["models"][name]["gpus"] = gpus
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    arrays = one_request_rules(config)
    assert "answer_humble" in arrays
    profile = cluster_profile(work / "profile", arrays)
    before = {job["JobId"] for job in slurm_jobs()}
    command = [sys.executable, "-m", "snakemake", "--profile", str(profile), "--configfile", "config.yaml"]
    # The profile passes the hub cache on to every job, and Snakemake refuses to start without it.
    hub = os.environ | {"HF_HOME": str(work / "huggingface"), "HF_HUB_OFFLINE": "1"}
    run_snakemake(command, work, hub, timeout=1500)
    # The workflow's jobs only (another test's sbatch may have run meanwhile).
    jobs = [job for job in slurm_jobs() if job["JobId"] not in before and job.get("Comment", "").startswith("rule_")]
    return work, config, jobs


def test_the_tiny_preset_runs_through_the_slurm_profile(slurm_run):
    work, config, jobs = slurm_run
    assert all((work / target).exists() for target in final_targets(config))
    assert {job["JobState"] for job in jobs} == {"COMPLETED"}


def test_each_job_asked_slurm_for_its_models_gpus(slurm_run):
    _, config, jobs = slurm_run
    submitted = Counter(
        (job["Comment"].split("_wildcards_")[0].removeprefix("rule_"), requested_gpus(job)) for job in jobs
    )
    plan = job_table(config)
    expected = Counter(zip(plan["rule"], plan["gpus"], strict=True))
    assert submitted == Counter({key: n for key, n in expected.items() if key[0] not in local_rules()})
    assert submitted[("judge_images", 2)] == submitted[("judge_images", 1)] > 0  # tiny-qwen2.5-vl, tiny-internvl3
    assert submitted[("check_prompt_quality", 1)] == 1  # the NLI model's GPU, the larger need of the stage
    assert submitted[("export_dataset", 0)] == 1
    # Every GPU job names the profile's GPU model; a CPU job asks for no GPU at all (no `--gpus=h100:0`).
    gpu_jobs = [job for job in jobs if requested_gpus(job)]
    assert {re.sub(r":\d+$", "", job["TresPerJob"]) for job in gpu_jobs} == {f"gres:gpu:{cluster_gpu_model()}"}
    assert all("gpu" not in job.get("TresPerJob", "") for job in jobs if job not in gpu_jobs)


def test_each_job_asked_slurm_for_the_cpus_memory_and_time_it_needs(slurm_run):
    """What SLURM recorded for each job is what `blindspot plan` says that job needs (from its models)."""
    _, config, jobs = slurm_run
    planned = job_table(config)
    needs = {}
    for job in planned.to_dict("records"):
        name = job["job"]
        comment = f"rule_{job['rule']}" + ("" if name == "all" else "_wildcards_" + name.replace("/", "_"))
        needs[comment] = job
    for job in jobs:
        need = needs[job["Comment"].removesuffix("_wildcards_")]
        assert asks_for_memory(job, need["mem_mb"]), (job["Comment"], job["TRES"])
        assert job["TimeLimit"] == time.strftime("%H:%M:%S", time.gmtime(60 * need["runtime"])), job["Comment"]
        assert job["NumCPUs"] == str(need["threads"]), job["Comment"]
    # The 2-GPU render jobs (tiny-sd3) get a CPU per GPU, the 1-GPU ones one.
    cpus = {
        job["Comment"].split("_wildcards_")[1]: job["NumCPUs"]
        for job in jobs
        if job["Comment"].startswith("rule_render_images")
    }
    assert cpus == {"animals_tiny-flux_00000": "1", "animals_tiny-sd3_00000": "2", "animals_tiny-sana_00000": "1"}


def test_each_job_ran_in_the_partition_that_fits_it(slurm_run):
    """With the example partitions file the plugin sends a GPU job to `gpu` and a CPU job to `cpu`."""
    _, _, jobs = slurm_run
    partitions = Counter(("gpu" if requested_gpus(job) else "cpu", job["Partition"]) for job in jobs)
    assert set(partitions) == {("gpu", "gpu"), ("cpu", "cpu")}, partitions


def test_a_rule_whose_jobs_ask_for_one_request_ran_as_one_array(slurm_run):
    """answer_humble's three shards went to SLURM in one sbatch, as one array whose every task asked for the
    request the plan gives each of them, and every one of their outputs arrived."""
    work, config, jobs = slurm_run
    plan = job_table(config)
    planned = plan[plan["rule"] == "answer_humble"]
    tasks = [job for job in jobs if job["Comment"].startswith("rule_answer_humble_")]
    assert len(tasks) == len(planned) == 3
    assert len({task["ArrayJobId"] for task in tasks}) == 1
    assert sorted(int(task["ArrayTaskId"]) for task in tasks) == [1, 2, 3]
    (gpus, threads, mem_mb, runtime), *others = (
        planned[["gpus", "threads", "mem_mb", "runtime"]].drop_duplicates().values
    )
    assert not others
    for task in tasks:
        assert (requested_gpus(task), task["NumCPUs"]) == (gpus, str(threads))
        assert asks_for_memory(task, mem_mb), task["TRES"]
        assert task["TimeLimit"] == time.strftime("%H:%M:%S", time.gmtime(60 * runtime))
    assert all((work / output).exists() for output in planned["output"])


def test_a_job_killed_for_its_memory_comes_back_with_twice_the_memory_and_succeeds(cluster, tmp_path):
    """Through the profile (its retries and requeue setting), a job whose memory grows with the attempt, as
    every workflow job's does, and that needs more than its first request: SLURM kills attempt 1 for its
    memory, and Snakemake submits attempt 2 with twice the --mem, which succeeds."""
    work = tmp_path / "retry"
    work.mkdir()
    # The job step's Snakemake holds about 150 MB besides the 500 MB the job holds for a few seconds.
    (work / "Snakefile").write_text(
        "rule hold_memory:\n"
        '    output: "held.txt"\n'
        "    resources: mem_mb=lambda wildcards, attempt: 450 * attempt, runtime=5\n"
        "    shell:\n"
        f"        \"{sys.executable} -c 'import time; held = bytearray(500 * 2**20); time.sleep(5)'\"\n"
        '        " && echo {resources.mem_mb} > {output}"\n'
    )
    profile = cluster_profile(work / "profile")
    before = {job["JobId"] for job in slurm_jobs()}
    hub = os.environ | {"HF_HOME": str(work / "huggingface"), "HF_HUB_OFFLINE": "1"}
    run_snakemake([sys.executable, "-m", "snakemake", "--profile", str(profile)], work, hub, timeout=600)
    attempts = sorted(
        (job for job in slurm_jobs() if job["JobId"] not in before and job.get("Comment") == "rule_hold_memory"),
        key=lambda job: int(job["JobId"]),
    )
    assert [job["JobState"] for job in attempts] in (["FAILED", "COMPLETED"], ["OUT_OF_MEMORY", "COMPLETED"])
    assert ["mem=450M" in attempts[0]["TRES"], "mem=900M" in attempts[1]["TRES"]] == [True, True]
    assert (work / "held.txt").read_text().strip() == "900"
    assert attempts[0]["Partition"] == attempts[1]["Partition"] == "cpu"


def test_a_job_that_outgrows_its_memory_is_killed(cluster, tmp_path):
    """The test cluster enforces --mem as a real one does, so a job that needs more than it asked for fails here."""
    hog = tmp_path / "hog.py"
    hog.write_text("import time\nheld = [bytearray(50 * 2**20) for _ in range(12)]\ntime.sleep(4)\nprint('survived')\n")
    out = tmp_path / "hog.out"
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--wait",
            "--mem=200M",
            "-t",
            "2",
            "-o",
            str(out),
            "--wrap",
            f"{sys.executable} {hog}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert submitted.returncode != 0
    deadline = time.monotonic() + 60
    while True:  # `sbatch --wait` returns while SLURM may still be COMPLETING the killed job
        record = next(job for job in slurm_jobs() if job["JobId"] == submitted.stdout.strip())
        if record["JobState"] != "COMPLETING" or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert record["JobState"] in {"FAILED", "OUT_OF_MEMORY"}
    assert "Exceeded job memory limit" in out.read_text()
    assert "survived" not in out.read_text()


def test_submitit_runs_one_stage_with_the_profiles_resources(slurm_run, tmp_path, monkeypatch):
    work, config, _ = slurm_run
    monkeypatch.chdir(work)  # where the workflow ran: the job's inputs are the workflow's
    fields = {"domain": "animals", "t2i": "tiny-sd3", "shard": "00000"}
    job = submit_stage(
        "render_images",
        work / "config.yaml",
        folder=tmp_path / "submitit",
        profile=work / "profile" / "config.yaml",
        images_dir=str(tmp_path / "images"),
        out=str(tmp_path / "renders.parquet"),
        counters_out=str(tmp_path / "renders.json"),
        **fields,
    )
    deadline = time.monotonic() + 600
    while not job.done() and time.monotonic() < deadline:
        time.sleep(2)
    job.result()
    record = next(j for j in slurm_jobs() if j["JobId"] == str(job.job_id))
    assert requested_gpus(record) == TEST_GPUS["tiny-sd3"]
    assert record["NumCPUs"] == "2"
    assert record["Comment"] == "rule_render_images"
    assert record["Partition"] == "gpu"  # from the profile's partitions file, as the plugin picks it
    # The same stage, inputs and seeds render the same images as the workflow's job did.
    mine = read_table(tmp_path / "renders.parquet", schemas.RENDERS)
    workflow = read_table(path(config, "renders", **fields), schemas.RENDERS)
    assert len(mine) == len(workflow) > 0
    pd.testing.assert_series_equal(mine["image_id"], workflow["image_id"])
    pd.testing.assert_series_equal(mine["sha256"], workflow["sha256"])
