"""The workflow's steps: one module per rules file (`workflow/rules/<stage>.smk` -> `blindspot.steps.<stage>`),
one function per rule, named like it (`blindspot.catalogue` says which).

A step is a thin read -> call -> write around logic that lives, with its tests, in the domain modules.
It takes exactly its rule's named inputs, outputs, params and wildcards, never the whole config: what
it reads is what its rule names, so what triggers a re-run is what the code reads (tests/workflow/test_steps.py
holds every rule to that). A model arrives as its resolved registry entry (`blindspot.models.spec.ModelSpec`
as a dict), so editing the entry re-runs its jobs.

Every rule runs `workflow/scripts/run_stage.py`, which calls `run_from_snakemake`. Every job leaves the
arguments it ran with beside its log (`.job.json`): `python -m blindspot.steps replay FILE` runs that job
again, and `python -m blindspot.steps run STEP --configfile FILE NAME=VALUE ...` runs one job of a config
by hand, with the arguments the workflow would give it.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import catalogue
from blindspot.images import ImageReadError
from blindspot.io import provenance, remove_stale_temps, write_json, write_table
from blindspot.models.device import GPUUnavailable, running_step
from blindspot.models.spec import ModelSpec
from blindspot.protobias.metric_scores import NoAnswers
from blindspot.protobias.triplets import ShardFailedError
from blindspot.shards import shard_slice

log = logging.getLogger("blindspot")
# What stops a job for a reason its message names (a file, key or value; a job without its GPUs; a shard
# whose every item failed): one line, as the CLI shows the same errors. ValueError covers the config's,
# the plug-ins' and the inputs' own errors.
JOB_STOPPERS = (ValueError, FileNotFoundError, ImageReadError, GPUUnavailable, ShardFailedError, NoAnswers)


def step_function(name: str) -> Callable[..., None]:
    """The function that runs the step `name`, from its stage's module."""
    step = catalogue.STEPS[name]
    module = importlib.import_module(f"blindspot.steps.{step.stage}")
    return getattr(module, step.function or name)


def setup_logging(log_path: str | None = None) -> None:
    """Send everything (stderr, warnings, progress bars) to the job's log file."""
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        sys.stderr = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the job
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    logging.captureWarnings(True)


def spec(model: dict[str, Any]) -> ModelSpec:
    """A model's spec from the resolved registry entry its rule passes (`get_model_spec` in common.smk)."""
    return ModelSpec(**model)


def require_planned_code(running: Any, planned: Any, running_said: str, planned_said: str) -> None:
    """Stop a job whose code is not what the workflow planned with (a param of its rule, from the env
    Snakemake runs in): its outputs would be keyed, or re-run, by the other code."""
    if running != planned:
        raise ValueError(
            f"{running_said}, the workflow planned with {planned_said}: install the same version "
            "where Snakemake runs and in the job's env"
        )


def shard_rows(frame: pd.DataFrame, shard: str, shard_size: int) -> pd.DataFrame:
    """The rows of one shard: a slice of a domain's sorted seeds, as every sharded rule takes it."""
    return frame.iloc[shard_slice(shard, shard_size)]


def write_counters(counters_out: str, counters: dict[str, Any], what: str, **about: Any) -> None:
    """Log a job's counters and write them beside its output, with the provenance of the run."""
    log.info("%s: %s", what, json.dumps(counters))
    write_json(counters_out, counters | {"provenance": provenance(**about)})


def write_shard(
    frame: pd.DataFrame, counters: dict[str, Any], schema: Any, out: str, counters_out: str, what: str
) -> None:
    """A model shard's table and counters. A shard whose every row failed stops the job instead: its
    model or template is broken, and an empty table would hide it downstream."""
    from blindspot.protobias.triplets import raise_if_all_failed

    raise_if_all_failed(frame, counters, what)
    write_counters(counters_out, counters, what)
    write_table(out, frame, schema)


def step_arguments(step: Callable[..., None], job: Any) -> dict[str, Any]:
    """A step's arguments from a Snakemake job: its outputs, inputs, params and wildcards, by name; an
    argument with a default that the rule does not name keeps it (a param only some of its rules pass)."""
    sources = [job.output, job.input, job.params, job.wildcards]
    arguments = {}
    for name, parameter in inspect.signature(step).parameters.items():
        # Namedlist is a list: `in` alone would search its values, not its names.
        found = next((source for source in sources if name in source.keys()), None)  # noqa: SIM118
        if found is None and parameter.default is not inspect.Parameter.empty:
            continue
        if found is None:
            raise TypeError(f"rule {job.rule}: step {step.__name__} needs '{name}', which the rule does not name")
        arguments[name] = getattr(found, name)
    return arguments


@contextmanager
def private_modules_cache() -> Iterator[Path]:
    """A job's own HF_MODULES_CACHE, removed when the job ends. transformers imports a model's remote
    code (`trust_remote_code`: InternVL's) from a copy it writes there, truncating the file first, so jobs
    that start together on one shared HF_HOME can import another's half-written copy
    (huggingface/transformers#27421). Set before the job imports transformers, which reads it once;
    vLLM's workers inherit it."""
    previous = os.environ.get("HF_MODULES_CACHE")
    with tempfile.TemporaryDirectory(prefix="blindspot-modules-") as folder:
        os.environ["HF_MODULES_CACHE"] = folder
        try:
            yield Path(folder)
        finally:
            if previous is None:
                del os.environ["HF_MODULES_CACHE"]
            else:
                os.environ["HF_MODULES_CACHE"] = previous


def run_step(step: str, /, **arguments: Any) -> None:
    """Run the step named `step` as one job (its arguments may have any name, `step` too), with its own
    modules cache (`private_modules_cache`). Messages about the job's resources name it, and a job
    stopped by bad input, a missing GPU or a shard that failed whole stops with the one line that says
    why (`JOB_STOPPERS`); a job that writes a log file keeps the traceback there, above that line, for
    whoever debugs it."""
    with running_step(step), private_modules_cache():
        try:
            step_function(step)(**arguments)
        except JOB_STOPPERS as error:
            if sys.stderr is not sys.__stderr__:  # a job's log file (`setup_logging`): the traceback goes there too
                log.error("the job stopped; where:", exc_info=True)
            raise SystemExit(str(error)) from None


def job_file(log_path: str) -> Path:
    """Where a job leaves the arguments it ran with: beside its log."""
    return Path(log_path).with_suffix(".job.json")


def remove_killed_runs_temps(outputs: Iterable[str | Path]) -> None:
    """Remove the half-written temporaries a killed run of a job (kill -9, preemption) left beside its
    `outputs`: only this job writes those names, so they are its to remove. Called as the job starts,
    under Snakemake (`run_from_snakemake`) or submitit (`blindspot.slurm.submit_stage`)."""
    stale = remove_stale_temps(outputs)
    if stale:
        log.info("removed %d temporary file(s) a killed run left: %s", len(stale), ", ".join(map(str, stale)))


def run_from_snakemake(job: Any) -> None:
    setup_logging(job.log[0])
    remove_killed_runs_temps([*job.output, job_file(job.log[0])])
    arguments = step_arguments(step_function(job.rule), job)
    # So that `python -m blindspot.steps replay FILE` can run the job again outside Snakemake.
    record = {"step": job.rule, "wildcards": dict(job.wildcards.items()), "arguments": arguments}
    write_json(job_file(job.log[0]), record, sort_keys=False)  # a mapping's order can be the order of a table
    run_step(job.rule, **arguments)


def replay(path: str) -> None:
    """Run a job again from the arguments it left beside its log, in the folder Snakemake ran it in."""
    try:
        job = json.loads(Path(path).read_text())
        step, arguments = job["step"], job["arguments"]
    except FileNotFoundError:
        raise SystemExit(f"{path}: no such job file (a job leaves one beside its log, ending in .job.json)") from None
    except (ValueError, KeyError, TypeError):
        raise SystemExit(f"{path} is not a job file: JSON with the job's step and arguments") from None
    run_step(step, **arguments)
