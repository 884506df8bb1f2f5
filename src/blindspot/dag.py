"""The workflow's own DAG of jobs, from Snakemake, for a config: what `blindspot plan` counts and what a
step run by hand (`python -m blindspot.steps run`) takes, so neither enumerates the jobs a second time."""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from blindspot.paths import CHECKOUT, SNAKEFILE


def checkout_config(configfile: str | None, default: str) -> dict[str, Any]:
    """The config at `configfile` (named from the current folder), or else the checkout's `default`,
    loaded and checked in the checkout, where the workflow reads its relative paths (taxonomies,
    templates, results): a command that reads a config means the files the workflow would."""
    from blindspot.checks import load_config

    path = Path(configfile).resolve() if configfile else CHECKOUT / default
    with contextlib.chdir(CHECKOUT):
        return load_config(path)


class DAGError(ValueError):
    """A config whose DAG Snakemake cannot build; the message is Snakemake's, on one line."""


@contextlib.contextmanager
def _jobs(config_yaml: str) -> Iterator[list[Any]]:
    """Snakemake's jobs of a run from scratch (`snakemake -n --forceall`) of the checkout's workflow, run
    from the current folder as `snakemake` would be (relative paths in the config are relative to it)."""
    from snakemake.api import SnakemakeApi
    from snakemake.exceptions import RuleException, WorkflowError
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, Quietness, ResourceSettings

    with tempfile.TemporaryDirectory(prefix="blindspot-dag-") as folder:
        configfile = Path(folder) / "config.yaml"
        configfile.write_text(config_yaml)
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            workflow_api = api.workflow(
                ResourceSettings(), ConfigSettings(configfiles=[configfile]), snakefile=SNAKEFILE, workdir=Path.cwd()
            )
            # The DAG API runs or prints a DAG, but hands out none: build it as `snakemake --d3dag` does.
            workflow = workflow_api.dag(DAGSettings(forceall=True)).workflow_api._workflow
            try:
                workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
                workflow._build_dag()
            except (RuleException, WorkflowError) as error:  # e.g. a file the config names is not there
                raise DAGError(f"Snakemake cannot plan this config: {' '.join(str(error).split())}") from None
            yield list(workflow.dag.jobs)


def dag_jobs(config: dict[str, Any]) -> list[tuple[str, dict[str, str], str, str]]:
    """(rule, wildcards, first output, counters file or "") of every job of a run from scratch."""
    jobs = _dag_jobs(yaml.safe_dump(config, sort_keys=False), str(Path.cwd()))
    return [(rule, dict(wildcards), output, counters) for rule, wildcards, output, counters in jobs]


@functools.lru_cache(maxsize=8)
def _dag_jobs(config_yaml: str, folder: str) -> tuple[tuple[str, tuple[tuple[str, str], ...], str, str], ...]:
    with _jobs(config_yaml) as jobs:
        return tuple(
            (
                job.rule.name,
                tuple(job.wildcards.items()),
                str(job.output[0]) if job.output else "",
                str(job.output.get("counters_out", "")),  # the steps' name for it (`steps.write_counters`)
            )
            for job in jobs
        )


def job_arguments(config: dict[str, Any], rule: str, wildcards: dict[str, str]) -> dict[str, Any]:
    """The arguments the workflow passes the step of one job: its rule's inputs, outputs, params and
    wildcards, as Snakemake evaluates them. An unknown job is a ValueError naming the ones there are."""
    return job_arguments_and_outputs(config, rule, wildcards)[0]


def job_arguments_and_outputs(
    config: dict[str, Any], rule: str, wildcards: dict[str, str]
) -> tuple[dict[str, Any], list[str]]:
    """`job_arguments`, and the names of those that are the job's outputs."""
    from blindspot.steps import step_arguments, step_function

    with _jobs(yaml.safe_dump(config, sort_keys=False)) as jobs:
        mine = [job for job in jobs if job.rule.name == rule]
        for job in mine:
            if dict(job.wildcards.items()) == wildcards:
                # Plain values, as a job's .job.json holds them: Snakemake's own types do not pickle (submitit).
                arguments = json.loads(json.dumps(step_arguments(step_function(rule), job), default=str))
                return arguments, list(job.output.keys())
    there = sorted(" ".join(f"{k}={v}" for k, v in job.wildcards.items()) or "(no wildcards)" for job in mine)
    raise ValueError(f"no job of {rule} with wildcards {wildcards or '(none)'}; its jobs: {'; '.join(there) or 'none'}")


def output_paths(arguments: dict[str, Any], names: list[str]) -> list[str]:
    """The paths of the arguments named `names` (the job's outputs): each one path, or a list of them."""
    return [
        str(path)
        for name in names
        for path in (arguments[name] if isinstance(arguments[name], list | tuple) else [arguments[name]])
    ]
