"""profiles/slurm: it names only rules that reach SLURM, and passes the hub settings to every job; a
stage submitted through submitit (no cluster here) starts as a workflow's job does."""

import logging
import re
import sys
from types import SimpleNamespace

import pytest
import yaml
from helpers.workflow import REPO, local_rules

PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
PARTITIONS = REPO / "profiles" / "slurm" / "partitions.example.yaml"


def workflow_rules():
    text = "".join(smk.read_text() for smk in (REPO / "workflow" / "rules").glob("*.smk"))
    rules = set(re.findall(r"^rule (\w+):", text, flags=re.M))
    rules |= set(re.findall(r"^use rule \w+ as (\w+)", text, flags=re.M))
    return rules, local_rules()


def test_the_profile_names_only_rules_that_reach_slurm():
    rules, local = workflow_rules()
    assert {"render_images", "score_api_metric"} <= rules
    assert {"make_table1", "score_api_metric"} <= local
    assert "make_humble_questions" not in local  # it decodes the whole release: a cluster job
    profile = yaml.safe_load(PROFILE.read_text())
    for section in ("set-threads", "set-resources"):
        named = set(profile.get(section, {}))
        assert named <= rules - local, f"{section}: {sorted(named - (rules - local))}"


def test_jobs_read_weights_offline_from_the_hub_cache_the_profile_passes_on():
    profile = yaml.safe_load(PROFILE.read_text())
    assert {"HF_HOME", "HF_HUB_OFFLINE"} <= set(profile["envvars"])
    # Memory and time come from the rules (blindspot.resources), never from a default.
    assert not {"mem_mb", "runtime"} & set(profile.get("default-resources") or {})


def documented_profile_options() -> set[str]:
    """The options docs/usage.md's table of the SLURM profile explains (its first column)."""
    text = (REPO / "docs" / "usage.md").read_text()
    table = text.split("<!-- profile-options:", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `([\w-]+)` \|", table, flags=re.M))


def test_every_option_of_the_profile_is_the_plugins_and_explained_in_the_docs():
    """Every setting of profiles/slurm, the commented site settings among them, is in the docs' table of the
    profile; every `slurm-` option it or the docs name is one plugin 2.8 has (a misspelt one would stop the run)."""
    from dataclasses import fields

    from snakemake_executor_plugin_slurm import ExecutorSettings

    text = PROFILE.read_text()
    options = set(yaml.safe_load(text))
    commented = set(re.findall(r"^# ([\w-]+):", text, flags=re.M)) & {"slurm-partition-config", "default-resources"}
    assert commented == {"slurm-partition-config", "default-resources"}
    documented = documented_profile_options()
    assert options | commented <= documented, sorted(options | commented - documented)
    plugin = {f"slurm-{field.name.replace('_', '-')}" for field in fields(ExecutorSettings)}
    named = set(re.findall(r"\bslurm-[a-z-]+[a-z]", text)) | {o for o in documented if o.startswith("slurm-")}
    named |= set(re.findall(r"`(slurm-[a-z-]+[a-z])`", (REPO / "docs" / "usage.md").read_text()))
    assert named <= plugin, sorted(named - plugin)
    assert {"slurm-requeue", "slurm-no-requeue", "slurm-array-jobs", "slurm-efficiency-report"} <= named


def test_the_example_partitions_send_gpu_jobs_to_the_gpu_partition_and_cpu_jobs_to_the_cpu_one(paper_config, tmp_path):
    """The plugin's own choice (its `get_best_partition`) from partitions.example.yaml, for every job of the
    paper plan that reaches SLURM, at each attempt, with the resources the rules give it and the site's GPU
    model: a GPU job goes to `gpu`, a CPU job to `cpu`, however much memory and time its retries ask for.
    A stage submitted through submitit with a profile that names the file goes where the rule's job goes."""
    from snakemake_executor_plugin_slurm.partitions import get_best_partition, read_partition_file

    from blindspot.catalogue import STEPS
    from blindspot.dag import dag_jobs
    from blindspot.resources import job_resources
    from blindspot.slurm import profile_partition, profile_resources

    partitions = read_partition_file(PARTITIONS)
    site = tmp_path / "config.yaml"
    site.write_text(f"slurm-partition-config: {PARTITIONS}\ndefault-resources: {{gpu_model: h100}}\n")
    local = local_rules()
    chosen = {}
    for rule, wildcards, output, _ in dag_jobs(paper_config):
        if rule not in STEPS or rule in local:
            continue
        for attempt in (1, 2, 3):
            needs = job_resources(paper_config, rule, wildcards, attempt)
            gpu = {"gpu": needs.gpus, "gpu_model": "h100"} if needs.gpus else {}
            resources = {"nodes": 1, "mem_mb": needs.mem_mb, "runtime": needs.runtime} | gpu
            job = SimpleNamespace(name=rule, threads=needs.threads, resources=resources)
            partition = get_best_partition(partitions, job, logging.getLogger(__name__))
            assert partition == ("gpu" if needs.gpus else "cpu"), (output, attempt)
            chosen[partition] = chosen.get(partition, 0) + 1
        needs = job_resources(paper_config, rule, wildcards)
        own = profile_resources(rule, 1, site, own={"mem_mb": needs.mem_mb, "runtime": needs.runtime})
        assert profile_partition(rule, own, needs.threads, needs.gpus, site) == ("gpu" if needs.gpus else "cpu")
    assert set(chosen) == {"gpu", "cpu"}
    # a GPU model the partition does not have finds no partition (the plugin then uses the cluster's default)
    job = SimpleNamespace(name="x", threads=8, resources={"gpu": 1, "gpu_model": "a100", "mem_mb": 9000})
    assert get_best_partition(partitions, job, logging.getLogger(__name__)) is None


def test_the_list_form_of_a_profile_reads_as_its_mapping_form(tmp_path):
    """Snakemake takes default-resources, set-resources and set-threads as mappings or as lists of their
    command-line form; a site profile may use either."""
    from blindspot.slurm import profile_resources, profile_threads

    mappings, lists = tmp_path / "mappings.yaml", tmp_path / "lists.yaml"
    mappings.write_text(
        "default-resources: {slurm_partition: gpu, slurm_account: lab}\n"
        "set-resources: {render_images: {slurm_partition: big, mem_mb: 8000 * attempt}}\n"
        "set-threads: {render_images: 4}\n"
    )
    lists.write_text(
        "default-resources: [slurm_partition=gpu, slurm_account=lab]\n"
        "set-resources: ['render_images:slurm_partition=big', 'render_images:mem_mb=8000 * attempt']\n"
        "set-threads: [render_images=4]\n"
    )
    for profile in (mappings, lists):
        assert profile_resources("render_images", 2, profile) == {
            "slurm_partition": "big",
            "slurm_account": "lab",
            "mem_mb": 16000,
        }
        assert profile_resources("judge_images", 1, profile) == {"slurm_partition": "gpu", "slurm_account": "lab"}
        assert (profile_threads("render_images", profile), profile_threads("judge_images", profile)) == (4, None)
    # As in Snakemake, a rule's own resources beat the defaults and lose to the rule's set-resources.
    site = tmp_path / "site.yaml"
    site.write_text("default-resources: [mem_mb=4000, runtime=60]\nset-resources: [render_images:runtime=600]\n")
    assert profile_resources("render_images", 1, site, own={"mem_mb": 9000, "runtime": 30}) == {
        "mem_mb": 9000,
        "runtime": 600,
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text("set-resources: [slurm_partition=big]\n")
    with pytest.raises(ValueError, match=r"set-resources entry 'slurm_partition=big' is not RULE:NAME=VALUE$"):
        profile_resources("render_images", 1, bad)


def test_sizes_and_times_in_a_profile_are_read_in_snakemakes_units(tmp_path):
    """Snakemake takes `mem: 16G`, `mem_mib` and `runtime: 2h` and gives a job `mem_mb` and minutes; the
    submitit path reads them the same, so a site's `mem: 100G` for a rule replaces the job's own mem_mb."""
    from blindspot.slurm import profile_resources

    site = tmp_path / "site.yaml"
    site.write_text(
        "default-resources: {slurm_partition: gpu, disk: 1T, mem_mib: 1000, runtime: 30}\n"
        "set-resources: {render_images: {mem: 100G, runtime: 2h}, judge_images: {mem_mib: 2000 * attempt}}\n"
    )
    own = {"mem_mb": 9000, "runtime": 45}
    assert profile_resources("render_images", 1, site, own=own) == {
        "slurm_partition": "gpu",
        "disk_mb": 1000000,
        "mem_mb": 100000,
        "runtime": 120,
    }
    assert profile_resources("judge_images", 2, site, own=own)["mem_mb"] == 4194  # 4000 MiB, as Snakemake rounds it
    assert profile_resources("make_seeds", 1, site) == {
        "slurm_partition": "gpu",
        "disk_mb": 1000000,
        "mem_mb": 1048,
        "runtime": 30,
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text("set-resources: {render_images: {mem: lots}}\n")
    with pytest.raises(ValueError, match=r"^profile .*bad.yaml: set-resources of render_images: Resource 'mem'.*"):
        profile_resources("render_images", 1, bad)


# slow: a job in a fresh Python process (seconds of imports), kept out of the fast tier's 5 minutes
@pytest.mark.slow
def test_a_submitted_stage_runs_in_its_envs_python_after_removing_what_a_killed_run_left(tmp_path, monkeypatch):
    """submitit runs a stage without Snakemake: in the Python given (its packages meet the stage's env file),
    after removing its outputs' temporaries as `run_from_snakemake` does, and only theirs."""
    import submitit

    from blindspot import schemas, steps
    from blindspot.io import is_temp_of, read_table
    from blindspot.slurm import submit_stage

    out = tmp_path / "seeds.parquet"
    left, others = tmp_path / f".{out.name}.0123abcd.tmp", tmp_path / ".seeds.parquet.json.4567cdef.tmp"
    for temporary in (left, others):
        temporary.write_text("half")
    assert is_temp_of(left, out)
    submitted = []

    class RunsHere:
        """Stands in for submitit's SLURM executor: runs the job as it is submitted."""

        def __init__(self, folder, cluster):
            pass

        def update_parameters(self, **parameters):
            pass

        def submit(self, function, *args):
            submitted.append(args)
            return function(*args)

    monkeypatch.setattr(submitit, "AutoExecutor", RunsHere)
    monkeypatch.setattr(steps, "setup_logging", lambda log_path=None: None)  # the test's stderr stays
    monkeypatch.chdir(REPO)  # the tiny config's paths start there
    submit_stage(
        "make_seeds",
        "config/tiny.yaml",
        folder=tmp_path / "submitit",
        python=sys.executable,
        domain="animals",
        out=str(out),
    )
    assert sorted(tmp_path.iterdir()) == [others, out, tmp_path / "submitit"]
    assert len(read_table(out, schemas.SEEDS)) > 0
    # a stage whose env this Python does not meet is refused before it waits for a GPU
    config = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    config["models"]["smollm2-135m"] |= {"backend": "vllm", "max_model_len": 2048}
    (tmp_path / "vllm.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(
        ValueError,
        match=r"^stage generate_triplets runs in workflow/envs/llm\.yaml, whose pins "
        rf"{re.escape(sys.executable)} does not meet: vllm==0\.32\.0 \(not installed\), ",
    ):
        submit_stage(
            "generate_triplets",
            tmp_path / "vllm.yaml",
            folder=tmp_path / "submitit",
            domain="animals",
            generator="smollm2-135m",
            shard="00000",
        )
    assert len(submitted) == 1
    with pytest.raises(ValueError, match=r"^python /nowhere/python: cannot run it to read its packages"):
        submit_stage("make_seeds", "config/tiny.yaml", python="/nowhere/python", domain="animals")
    # an interpreter that prints no versions, or fails, is one line naming it
    for python, problem in (
        ("/bin/true", "its package versions do not read"),
        ("/bin/false", r"reading its packages failed \(exit 1\)"),
    ):
        with pytest.raises(ValueError, match=rf"^python {python}: {problem}"):
            submit_stage("make_seeds", "config/tiny.yaml", python=python, domain="animals")
    # a job named by a wildcard that names nothing, or without one, is one line before the env is looked up
    for wildcards in ({"vlm": "typo"}, {}):
        with pytest.raises(ValueError, match=r"^no job of judge_images"):
            submit_stage(
                "judge_images", "config/tiny.yaml", python=sys.executable, domain="animals", shard="00000", **wildcards
            )
    assert len(submitted) == 1
