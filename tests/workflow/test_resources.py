"""What a job asks the cluster for follows from what it loads, the same for the rules, the plan and submitit."""

import copy
import re
import subprocess
import sys

import pytest
from helpers.workflow import REPO, local_rules

from blindspot import plan
from blindspot.checks import validate_config
from blindspot.config import ConfigError
from blindspot.resources import job_resources
from blindspot.slurm import profile_resources, submitit_parameters

PROFILE = REPO / "profiles" / "slurm" / "config.yaml"


def test_a_model_jobs_memory_is_its_base_weights_and_images_in_flight(paper_config):
    settings = paper_config["job_resources"]
    wildcards = {"domain": "animals", "t2i": "flux.1-schnell", "shard": "00000"}
    needs = job_resources(paper_config, "render_images", wildcards)
    image_stage = paper_config["image_stage"]
    # images of a full shard: both descriptions of each generator's triplet, each drawn images_per_description times
    items = (
        2
        * len(paper_config["prompt_stage"]["generators"])
        * image_stage["images_per_description"]
        * paper_config["shard_size"]
    )
    pixels = 1024 * 1024
    images = 2 * paper_config["image_stage"]["render_batch_size"]
    expected_mb = settings["base_mb"] + 1024 * 34 + images * pixels * settings["bytes_per_pixel"] / 2**20
    assert needs.mem_mb == pytest.approx(expected_mb, abs=1)
    assert needs.gpus == 1
    assert needs.threads == settings["threads_per_gpu"]
    seconds = paper_config["throughput"]["render_images"]["flux.1-schnell"]
    load = 34 / settings["load_gb_per_second"] + settings["engine_start_seconds"]["default"]  # FLUX's 34 GB
    minutes = settings["runtime_margin"] * (load + seconds * items) / 60
    assert needs.runtime == pytest.approx(minutes, abs=1)
    # A retry asks for twice the memory and time.
    again = job_resources(paper_config, "render_images", wildcards, attempt=2)
    assert (again.mem_mb, again.runtime) == (2 * needs.mem_mb, 2 * needs.runtime)


def test_sizing_a_job_reads_no_hub_cache(paper_config, monkeypatch):
    """The DAG sizes every job: a look-up on disk per model and job made the project's share of the
    10x dry run 20 % (bench/peers/dry_run.py), not 10 %."""

    def on_disk(*args, **kwargs):
        raise AssertionError("a job's resources looked up a cached commit")

    monkeypatch.setattr("blindspot.hub.cache.cached_commit", on_disk)
    judge = {"domain": "animals", "vlm": "qwen2.5-vl-32b-instruct", "shard": "00000"}
    assert job_resources(paper_config, "judge_images", judge).gpus >= 1


def test_no_attempt_asks_for_more_time_than_the_partition_allows(paper_config):
    uncapped = copy.deepcopy(paper_config)
    uncapped["job_resources"]["runtime_max"] = None
    cap = paper_config["job_resources"]["runtime_max"]
    wanted = [job_resources(uncapped, "train_protoscore", {}, attempt).runtime for attempt in (1, 2, 3)]
    assert wanted[0] < cap < wanted[2]  # the paper config's third try would be refused at submission
    asked = [job_resources(paper_config, "train_protoscore", {}, attempt).runtime for attempt in (1, 2, 3)]
    assert asked == [min(minutes, cap) for minutes in wanted]


def test_a_two_gpu_judge_gets_the_cpus_of_two_gpus_and_a_table_rule_one(paper_config):
    threads = paper_config["job_resources"]["threads_per_gpu"]
    wildcards = {"domain": "animals", "judge": "qwen2.5-32b-instruct", "generator": "x", "shard": "00000"}
    judge = job_resources(paper_config, "judge_triplets", wildcards)
    assert (judge.gpus, judge.threads) == (2, 2 * threads)
    del paper_config["throughput"]["judge_triplets"]
    untimed = job_resources(paper_config, "judge_triplets", wildcards)
    assert untimed.runtime == paper_config["job_resources"]["runtime_default"]  # no throughput: the default time
    table = job_resources(paper_config, "make_table3", {})
    assert (table.gpus, table.threads, table.runtime) == (0, 1, paper_config["job_resources"]["runtime_min"])


def test_a_hub_model_without_its_weights_size_is_refused_naming_the_key(paper_config):
    del paper_config["models"]["flux.1-schnell"]["weights_gb"]
    with pytest.raises(ConfigError, match=r"'models\.flux\.1-schnell\.weights_gb'"):
        validate_config(paper_config)


# What a site adds to every job: the SLURM profile's GPU model, and the manufacturer Kubernetes needs.
SITE_DEFAULTS = {"gpu_model": "h100", "gpu_manufacturer": "nvidia"}


@pytest.fixture(scope="module")
def paper_dry_run() -> list[tuple[str, str, dict[str, str]]]:
    """Every job of the paper run as `snakemake -n` shows it with the site's defaults: its rule, its first
    output and the resources Snakemake hands an executor (the target rule `all`, which runs nothing, aside)."""
    defaults = [f"{name}={value}" for name, value in SITE_DEFAULTS.items()]
    command = [sys.executable, "-m", "snakemake", "-n", "--forceall", "--configfile", "config/config.yaml"]
    result = subprocess.run(
        [*command, "--default-resources", *defaults],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    jobs = []
    for block in re.split(r"^(?:local)?rule ", result.stdout + result.stderr, flags=re.MULTILINE)[1:]:
        fields = dict(re.findall(r"^\s+(output|resources): (.+)$", block, flags=re.MULTILINE))
        if "output" in fields:
            asked = dict(kv.split("=", 1) for kv in fields["resources"].split(", "))
            jobs.append((block.split(":", 1)[0], fields["output"].split(", ")[0], asked))
    return jobs


@pytest.mark.integration
def test_every_submitted_job_asks_for_what_the_plan_says(paper_config, paper_dry_run):
    """Every job of the paper run, as Snakemake plans it with a site's GPU model, asks for the plan's GPUs,
    memory and time; none is left on a default, and a model job's memory holds its largest model's weights.
    A job that uses no GPU has neither `gpu` nor `gpu_model`: the SLURM plugin would turn the model alone
    into one GPU."""
    jobs = plan.job_table(paper_config).set_index("output")
    local = local_rules()
    checked, gpu_jobs = set(), 0
    for rule, output, asked in paper_dry_run:
        job = jobs.loc[output]
        if job["gpus"]:
            assert (int(asked["gpu"]), asked["gpu_model"]) == (job["gpus"], "h100"), (rule, output)
            gpu_jobs += 1
        else:
            assert not {"gpu", "gpu_model"} & set(asked), (rule, output)
        if rule in local:
            continue
        assert asked["nodes"] == "1", rule  # the SLURM plugin's --nodes: a job's GPUs on one node
        assert (int(asked["mem_mb"]), int(asked["runtime"])) == (job["mem_mb"], job["runtime"]), (rule, output)
        models = job["models"].split(",")
        weights = max(paper_config["models"].get(m, {}).get("weights_gb", 0) for m in models)
        assert job["mem_mb"] > 1024 * weights
        checked.add(rule)
    assert checked == set(jobs["rule"]) - local
    assert len(paper_dry_run) == len(jobs)
    assert 0 < gpu_jobs < len(jobs)


def kubernetes_gpu_request(resources: dict[str, str]) -> dict[str, str]:
    """What snakemake-executor-plugin-kubernetes (0.5.1, its `run_job`) asks of a pod for a job's resources:
    any job whose resources hold `gpu` is a GPU job, refused without `gpu_manufacturer`, and requests (and
    tolerates the taint of) `nvidia.com/gpu` or `amd.com/gpu`; any other job asks for no GPU."""
    if "gpu" not in resources:
        return {}
    manufacturer = resources.get("gpu_manufacturer", "").lower()
    if manufacturer not in {"nvidia", "amd"}:
        raise ValueError(f"GPU requested but no manufacturer set (gpu_manufacturer={manufacturer!r})")
    return {f"{manufacturer}.com/gpu": resources["gpu"]}


@pytest.mark.integration
def test_the_kubernetes_executor_accepts_every_job_and_gives_gpus_only_to_gpu_jobs(paper_config, paper_dry_run):
    """`snakemake --executor kubernetes -n` never reaches the plugin's check of a job's resources (a dry run
    submits nothing): its rule is applied to every job of the paper plan instead. With the site's
    manufacturer each job gets its plan's GPUs and a CPU job none (no GPU toleration either); without it,
    exactly the GPU jobs are refused, as the plugin refuses them."""
    gpus = plan.job_table(paper_config).set_index("output")["gpus"]
    for _, output, asked in paper_dry_run:
        expected = {"nvidia.com/gpu": str(gpus[output])} if gpus[output] else {}
        assert kubernetes_gpu_request(asked) == expected, output
        unset = {name: value for name, value in asked.items() if name != "gpu_manufacturer"}
        if gpus[output]:
            with pytest.raises(ValueError, match="no manufacturer"):
                kubernetes_gpu_request(unset)
        else:
            assert kubernetes_gpu_request(unset) == {}


def test_submitit_asks_for_the_jobs_own_resources_plus_the_profiles_site_settings(tmp_path):
    profile = tmp_path / "config.yaml"
    profile.write_text(PROFILE.read_text() + "\n" + "set-resources:\n  render_images: {slurm_partition: big}\n")
    site = profile_resources("render_images", 1, profile)
    assert site == {"slurm_partition": "big"}
    parameters = submitit_parameters({"mem_mb": 30000, "runtime": 90} | site, 8, 2, "render_images")
    assert (parameters["slurm_mem"], parameters["timeout_min"], parameters["cpus_per_task"]) == ("30000M", 90, 8)
    assert parameters["slurm_partition"] == "big"
    assert parameters["slurm_additional_parameters"] == {"gpus": "2"}


def test_api_judges_run_on_the_submit_host(paper_config):
    jobs = plan.job_table(paper_config)
    api = jobs[jobs["rule"] == "score_api_metric"]
    assert set(api["output"].str.split("/").str[3]) == {"gpt-5"}
    assert "score_api_metric" in local_rules()
    assert not jobs[(jobs["rule"] == "score_metric") & jobs["output"].str.contains("/gpt-5/")].shape[0]
