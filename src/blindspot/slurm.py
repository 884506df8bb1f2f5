"""Run one stage on SLURM from Python (a notebook), through submitit.

The resources come from the same places as for `snakemake --profile profiles/slurm`: GPUs, CPUs,
memory and time from what the job loads (`blindspot.resources`, as the rules ask), then partition,
account and any override from the profile (its `default-resources`, then the rule's `set-resources`
and `set-threads`, evaluated for the attempt), and without a partition there, the one the SLURM plugin
would pick from the profile's partitions file. So a stage submitted here asks SLURM for what the
workflow's job of that stage would ask, and runs with the thread count Snakemake would give it: CPU
kernels sum in an order that depends on the thread count, so only then are its outputs bit for bit
the workflow's. It runs in the Python given, whose packages must meet the stage's env file, as the
rule's conda env does.

    job = submit_stage("render_images", "config/config.yaml", domain="animals", t2i="flux.1-schnell",
                       shard="00000")  # the job's wildcards; other keywords override its arguments
    job.result()  # blocks; raises if the stage failed (its traceback is in the job's stderr)
"""

from __future__ import annotations

import ast
import json
import logging
import operator
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from blindspot.catalogue import STEPS, env_requirements, job_env
from blindspot.checks import load_config
from blindspot.config import as_list
from blindspot.io import write_json
from blindspot.paths import PROFILES_DIR, SOURCE_DIR
from blindspot.resources import job_resources

DEFAULT_PROFILE = PROFILES_DIR / "slurm" / "config.yaml"
# What Snakemake sets to a job's threads before running it (snakemake/shell.py).
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _evaluate(expression: Any, attempt: int) -> Any:
    """A profile resource: a number, a string, or arithmetic on `attempt` such as `8000 * attempt`."""
    if not isinstance(expression, str):
        return expression

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id == "attempt":
            return attempt
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError

    try:
        return value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError):
        return expression  # a plain string such as a partition name


def _section(settings: dict[str, Any], key: str, profile: str | Path) -> dict[str, Any]:
    """A profile section as a mapping. Snakemake also takes a list of its command-line form (`NAME=VALUE`;
    set-resources `RULE:NAME=VALUE`, made a mapping per rule here) or one such string."""
    value = settings.get(key) or {}
    if isinstance(value, dict):
        return value
    mapping: dict[str, Any] = {}
    for entry in as_list(value):
        name, equals, setting = str(entry).partition("=")
        rule, colon, name = name.rpartition(":") if key == "set-resources" else ("", ":", name)
        if not (equals and colon and name.strip()):
            form = "RULE:NAME=VALUE" if key == "set-resources" else "NAME=VALUE"
            raise ValueError(f"profile {profile}: {key} entry {entry!r} is not {form}")
        target = mapping.setdefault(rule.strip(), {}) if key == "set-resources" else mapping
        target[name.strip()] = setting.strip()
    return mapping


def _standard(section: dict[str, Any], attempt: int, where: str) -> dict[str, Any]:
    """A profile section's resources for the attempt, in the units Snakemake gives a job (its own
    `Resource`): a size (`mem: 16G`, `mem_mib`, `disk`) becomes `mem_mb` or `disk_mb`, a time such as
    `runtime: 2h` minutes."""
    from snakemake.exceptions import WorkflowError
    from snakemake.resources import Resource, SizedResources

    standard = {}
    for name, expression in section.items():
        try:
            resource = Resource(name, _evaluate(expression, attempt))
            if name.removesuffix("_mb").removesuffix("_mib") in SizedResources:
                resource = resource.standardize_size()
        except WorkflowError as error:
            raise ValueError(f"{where}: {' '.join(str(error).split())}") from None
        standard[resource.name] = resource.value
    return standard


def profile_resources(
    rule: str, attempt: int = 1, profile: str | Path = DEFAULT_PROFILE, own: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The resources of one job of `rule` on its `attempt`-th try, as Snakemake ranks them: the profile's
    default-resources, then the rule's `own`, then the profile's set-resources for the rule."""
    settings = yaml.safe_load(Path(profile).read_text()) or {}
    defaults = _section(settings, "default-resources", profile)
    chosen = _section(settings, "set-resources", profile).get(rule, {})
    return (
        _standard(defaults, attempt, f"profile {profile}: default-resources")
        | (own or {})
        | _standard(chosen, attempt, f"profile {profile}: set-resources of {rule}")
    )


def profile_threads(rule: str, profile: str | Path = DEFAULT_PROFILE) -> int | None:
    """The threads, and so the CPUs, the profile sets for a job of `rule`, if it overrides the job's own."""
    threads = _section(yaml.safe_load(Path(profile).read_text()) or {}, "set-threads", profile).get(rule)
    return None if threads is None else int(threads)


def profile_partition(
    rule: str, resources: dict[str, Any], threads: int, gpus: int, profile: str | Path = DEFAULT_PROFILE
) -> str | None:
    """The partition the SLURM plugin picks for a job from the profile's partitions file (its
    `slurm-partition-config`, beside the profile as Snakemake finds it, else `$SNAKEMAKE_SLURM_PARTITIONS`),
    by the plugin's own choice; None without a file, or when no partition fits (the cluster's default then).
    The job holds `gpu` and the profile's `gpu_model` only when it uses GPUs, as the rules' jobs do."""
    from snakemake_executor_plugin_slurm.partitions import get_best_partition, read_partition_file

    named = (yaml.safe_load(Path(profile).read_text()) or {}).get("slurm-partition-config")
    source = named or os.environ.get("SNAKEMAKE_SLURM_PARTITIONS")
    if not source:
        return None
    path = Path(profile).parent / source if named and (Path(profile).parent / source).exists() else Path(source)
    own = {name: value for name, value in resources.items() if name not in ("gpu", "gpu_model")}
    gpu = {"gpu": gpus} | {name: resources[name] for name in ("gpu_model",) if name in resources} if gpus else {}
    job = SimpleNamespace(name=rule, threads=threads, resources={"nodes": 1} | own | gpu)
    return get_best_partition(read_partition_file(path), job, logging.getLogger(__name__))


def with_partition(
    rule: str, resources: dict[str, Any], threads: int, gpus: int, profile: str | Path = DEFAULT_PROFILE
) -> dict[str, Any]:
    """`resources` with the job's partition: the profile's, as the plugin takes a partition the profile names
    first, else the one it would pick from the partitions file (`profile_partition`), else none (the default)."""
    if resources.get("slurm_partition"):
        return resources
    partition = profile_partition(rule, resources, threads, gpus, profile)
    return resources | ({"slurm_partition": partition} if partition else {})


def submitit_parameters(resources: dict[str, Any], threads: int, gpus: int, rule: str) -> dict[str, Any]:
    """submitit's parameters for the profile's resources, threads and a GPU count, spelled as the
    Snakemake SLURM plugin spells them (`--cpus-per-task=threads`, `--gpus=N` or `--gpus=model:N`)."""
    parameters: dict[str, Any] = {
        "slurm_mem": f"{resources['mem_mb']}M",
        "timeout_min": int(resources["runtime"]),
        "cpus_per_task": threads,
        "slurm_comment": f"rule_{rule}",
        "name": rule,
    }
    for name in ("slurm_partition", "slurm_account"):
        if name in resources:
            parameters[name] = resources[name]
    if gpus:
        model = resources.get("gpu_model")
        parameters["slurm_additional_parameters"] = {"gpus": f"{model}:{gpus}" if model else str(gpus)}
    return parameters


# Run in an interpreter: the versions of the distributions named on stdin (a JSON list), None where absent.
_VERSIONS = (
    "import json, sys\nfrom importlib import metadata\n"
    "def version(name):\n    try:\n        return metadata.version(name)\n"
    "    except metadata.PackageNotFoundError:\n        return None\n"
    "print(json.dumps({name: version(name) for name in json.load(sys.stdin)}))"
)


def unmet_pins(python: str, env: str) -> list[str]:
    """The pins of workflow/envs/<env>.yaml that `python`'s installed packages do not meet, each with
    what is installed ("transformers==5.19.0 (5.24.0 installed)", "vllm==0.32.0 (not installed)"); a
    local version label (torch's +cu130) is not part of the pin."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = [Requirement(line) for line in env_requirements(env)]
    try:
        found = subprocess.run(
            [python, "-c", _VERSIONS],
            input=json.dumps([pin.name for pin in pins]),
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise ValueError(f"python {python}: cannot run it to read its packages ({error})") from None
    said = (found.stderr.strip().splitlines() or [""])[-1]
    if found.returncode:
        raise ValueError(f"python {python}: reading its packages failed (exit {found.returncode}): {said}")
    unmet = []
    try:
        # The last line: what an interpreter's start-up prints (a wrapper's banner) comes before it.
        installed = json.loads((found.stdout.strip().splitlines() or [""])[-1])
        for pin in pins:
            version = installed[pin.name]
            if version is None or Version(version).public not in pin.specifier:
                unmet.append(f"{pin} ({'not installed' if version is None else f'{version} installed'})")
    except (ValueError, KeyError, TypeError) as error:  # InvalidVersion is a ValueError
        problem = f"{type(error).__name__}: {error}"
        raise ValueError(f"python {python}: its package versions do not read ({problem})") from None
    return unmet


def _run_stage(python: str, job: str, outputs: list[str], threads: int) -> None:
    """On the node: what a killed run left is removed, then the stage runs in `python` (its env's) as
    `python -m blindspot.steps replay` of the job's file, with the threads Snakemake would give it."""
    from blindspot.steps import remove_killed_runs_temps, setup_logging

    setup_logging()
    remove_killed_runs_temps(outputs)
    # the env's Python imports this checkout's blindspot
    path = os.pathsep.join(filter(None, [str(SOURCE_DIR), os.environ.get("PYTHONPATH")]))
    environment = os.environ | dict.fromkeys(THREAD_VARIABLES, str(threads)) | {"PYTHONPATH": path}
    done = subprocess.run([python, "-m", "blindspot.steps", "replay", job], env=environment, check=False)
    if done.returncode:
        raise RuntimeError(f"the stage failed in {python} (exit {done.returncode}); its log is the job's stderr")


def submit_stage(
    step: str,
    config_path: str | Path,
    *,
    folder: str | Path = "results/submitit",
    attempt: int = 1,
    profile: str | Path = DEFAULT_PROFILE,
    python: str | Path | None = None,
    **arguments: Any,
) -> Any:
    """Submit one job of `step` (a rule name), named by its wildcards as keywords; returns the submitit
    Job. The job runs with the arguments the workflow gives it (`blindspot.dag.job_arguments`, from
    the current folder), but for the other keywords, which replace them (e.g. `out=` elsewhere), in
    `python` (default: this one), whose packages must meet the pins of the stage's env file, as the
    rule's conda env does (else a ValueError lists what they miss, before any GPU is waited for). As
    under Snakemake, it first removes what a killed run left half-written beside its outputs.
    SLURM's output, the job's arguments and the pickled result go to `folder`."""
    import submitit

    from blindspot.dag import job_arguments_and_outputs, output_paths

    if step not in STEPS:
        raise ValueError(f"unknown stage '{step}' (stages: {', '.join(STEPS)})")
    config = load_config(config_path)
    wildcards = {name: str(arguments.pop(name)) for name in STEPS[step].wildcards if name in arguments}
    # First the job itself: a wildcard missing or naming nothing is a one-line error that lists its jobs.
    workflow_arguments, output_names = job_arguments_and_outputs(config, step, wildcards)
    python = str(python or sys.executable)
    env = job_env(config, step, wildcards)
    unmet = unmet_pins(python, env)
    if unmet:
        raise ValueError(
            f"stage {step} runs in workflow/envs/{env}.yaml, whose pins {python} does not meet: {', '.join(unmet)}; "
            "pass python= the interpreter of an env built from that file (Snakemake's are in .snakemake/conda)"
        )
    arguments = workflow_arguments | arguments
    needs = job_resources(config, step, wildcards, attempt)
    threads = profile_threads(step, profile) or needs.threads
    resources = profile_resources(step, attempt, profile, own={"mem_mb": needs.mem_mb, "runtime": needs.runtime})
    resources = with_partition(step, resources, threads, needs.gpus, profile)
    job = Path(folder).resolve() / f"{step}.{uuid.uuid4().hex[:8]}.job.json"
    write_json(job, {"step": step, "wildcards": wildcards, "arguments": arguments}, sort_keys=False)
    executor = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
    executor.update_parameters(**submitit_parameters(resources, threads, needs.gpus, step))
    return executor.submit(_run_stage, python, str(job), output_paths(arguments, output_names), threads)
