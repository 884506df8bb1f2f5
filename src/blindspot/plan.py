"""Plan a run before it starts: jobs per rule, GPU-hours per stage, the benchmark's expected size
beside the paper's, targets for partial re-runs.

The jobs are Snakemake's own: `job_table` builds the workflow's DAG of a run from scratch (what
`snakemake -n --forceall` plans) and adds to each job what the step catalogue says of it: its items,
GPUs, CPUs, memory and time (`blindspot.resources`). GPU-hours come from the config's `throughput:`
table (seconds per item per rule and model); a missing entry gives `n/a` and is named, never a guessed
number. `measured_throughput` turns the benchmark files of a finished run into such a table. The
benchmark's expected size beside the paper's is `blindspot.counts`'.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from blindspot import bill, catalogue, counts, physical_bound, targets
from blindspot.catalogue import DATA_WILDCARDS, SHARDED_STEPS, STEPS, THROUGHPUT_STEPS
from blindspot.dag import dag_jobs
from blindspot.io import read_json
from blindspot.resources import job_resources, load_seconds

ITEMS_NOTE = (
    "Items are at the config's expected shares (`prompt_stage.expected_acceptance` of the triplets accepted, "
    "`image_stage.expected_acceptance` of the pairs kept; a later filter VLM scores what the earlier ones passed "
    "and the validation pool), `items_upper` and `gpu_hours_upper` at every candidate kept: seeds per shard for "
    "the prompt stage; for images 2 x seeds x generators x images_per_description per T2I model, and for image "
    "quality and the metrics that times the T2I models. A job asks for the time of its upper bound. HumbleBench "
    "answers: the release's questions (`release_questions`) and two per benchmark image, per shard."
)
COLUMNS = [
    "stage",
    "rule",
    "job",
    "domain",
    "model",
    "models",
    "shard",
    "items",
    "items_upper",
    "gpus",
    "threads",
    "mem_mb",
    "runtime",
    "load_seconds",
    "bound_seconds_per_item",
    "throughput_key",
    "output",
    "counters",
]


def job_table(config: dict[str, Any]) -> pd.DataFrame:
    """One row per job of a run from scratch (the target rule `all` aside): its stage, rule, job name,
    models, items and resources."""
    rows = []
    for rule, wildcards, output, counters in dag_jobs(config):
        if rule not in STEPS:  # the target rule
            continue
        loaded = catalogue.job_models(config, rule, wildcards)
        named = [value for name, value in wildcards.items() if name not in DATA_WILDCARDS]
        rows.append(
            {
                "stage": STEPS[rule].stage,
                "rule": rule,
                "job": "/".join(wildcards[name] for name in STEPS[rule].wildcards) or "all",
                "domain": wildcards.get("domain", ""),
                "model": catalogue.job_model(config, rule, wildcards),
                # Every model a job is known by (a metric's name too), so that `targets --model` finds it.
                "models": ",".join(dict.fromkeys(named + loaded)),
                "shard": wildcards.get("shard", ""),
                "items": catalogue.expected_items(config, rule, wildcards),
                "items_upper": catalogue.job_items(config, rule, wildcards),
                **job_resources(config, rule, wildcards).as_dict(),
                "load_seconds": load_seconds(config, rule, wildcards),
                "bound_seconds_per_item": physical_bound.seconds_per_item(config, rule, wildcards),
                "throughput_key": catalogue.throughput_key(config, rule, wildcards),
                "output": output,
                "counters": counters,
            }
        )
    frame = pd.DataFrame(rows, columns=COLUMNS)
    order = frame["rule"].map(list(STEPS).index)
    frame = frame.assign(order=order).sort_values(["order", "job"], kind="stable").drop(columns="order")
    frame["items"] = frame["items"].astype(float)  # expected: a share of the upper bound
    frame["items_upper"] = frame["items_upper"].astype("Int64")
    return frame.reset_index(drop=True)


def with_gpu_hours(config: dict[str, Any], jobs: pd.DataFrame) -> pd.DataFrame:
    """Add `seconds_per_item`, `load_gpu_hours` (the job's loading, `resources.load_seconds`, x GPUs / 3600: a
    cluster bills the GPUs while the weights are read and the engine starts), `gpu_hours` (that and items x
    seconds x GPUs / 3600; `gpu_hours_upper` over the upper bound of items) and `bound_gpu_hours` (the least
    GPU time of the items, `physical_bound`); NaN where the table has no entry.

    A rule's `default` stands in for its models without an entry of their own. CPU-only jobs are 0.
    """
    catalogue.check_throughput(config)
    table = config.get("throughput", {})
    jobs = jobs.copy()
    seconds = []
    for rule, key, gpus in zip(jobs["rule"], jobs["throughput_key"], jobs["gpus"], strict=True):
        entries = table.get(rule, {})
        seconds.append(0.0 if gpus == 0 else entries.get(key, entries.get("default", float("nan"))))
    jobs["seconds_per_item"] = pd.Series(seconds, index=jobs.index, dtype=float)
    jobs["load_gpu_hours"] = jobs["load_seconds"] * jobs["gpus"] / 3600
    for hours, items in (("gpu_hours", "items"), ("gpu_hours_upper", "items_upper")):
        compute = jobs[items].astype(float).fillna(0) * jobs["seconds_per_item"] * jobs["gpus"] / 3600
        jobs[hours] = compute + jobs["load_gpu_hours"]
    jobs["bound_gpu_hours"] = jobs["items"].astype(float).fillna(0) * jobs["bound_seconds_per_item"] / 3600
    return jobs


def missing_throughput(jobs: pd.DataFrame) -> list[str]:
    """`rule.model` of every throughput entry that GPU jobs need and the table lacks."""
    missing = jobs[jobs["gpu_hours"].isna()]
    return sorted({f"{rule}.{key}" for rule, key in zip(missing["rule"], missing["throughput_key"], strict=True)})


def _hours(values: pd.Series) -> float:
    return float(values.sum(skipna=False))


def summarize(jobs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Jobs, GPUs per job, items and GPU-hours (NaN when any job lacks a throughput entry) per group, the
    bound's GPU-hours and the plan's ratio to them (`bound_ratio`: NaN where the bound is 0 or unknown)."""
    groups = jobs.groupby(by, sort=False)
    summary = groups.agg(
        jobs=("rule", "size"),
        gpus_per_job=("gpus", _span),
        cpus_per_job=("threads", _span),
        mem_gb_per_job=("mem_mb", lambda m: _span((m / 1024).round(1))),
        hours_per_job=("runtime", lambda r: _span((r / 60).round(1))),
        items=("items", _items),
        items_upper=("items_upper", _items),
        load_gpu_hours=("load_gpu_hours", "sum"),
        gpu_hours=("gpu_hours", _hours),
        gpu_hours_upper=("gpu_hours_upper", _hours),
        bound_gpu_hours=("bound_gpu_hours", _hours),
    ).reset_index()
    return summary.assign(bound_ratio=summary["gpu_hours"] / summary["bound_gpu_hours"].where(lambda b: b > 0))


STAGE_COLUMNS = [
    "stage",
    "jobs",
    "load_gpu_hours",
    "gpu_hours",
    "gpu_hours_upper",
    "bound_gpu_hours",
    "bound_ratio",
]


def _items(values: pd.Series) -> Any:
    """The group's items, whole (an expected count is a share of whole ones)."""
    return round(values.sum()) if values.notna().any() else pd.NA


def _span(values: pd.Series) -> str:
    """One value, or the least and the most: "8" or "4-16"."""
    low, high = values.min(), values.max()
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def plan(config: dict[str, Any]) -> dict[str, Any]:
    """Everything `blindspot plan` prints: per-rule, per (rule, domain, model) and per-stage tables, total,
    and the API models' bill (`blindspot.bill`)."""
    jobs = with_gpu_hours(config, job_table(config))
    return {
        "jobs": jobs,
        "rules": summarize(jobs, ["stage", "rule"]),
        "combinations": summarize(jobs[jobs["rule"].isin(list(SHARDED_STEPS))], ["rule", "domain", "model"]),
        "stages": summarize(jobs, ["stage"])[STAGE_COLUMNS],
        "total_jobs": len(jobs),
        "total_gpu_hours": _hours(jobs["gpu_hours"]),
        "total_gpu_hours_upper": _hours(jobs["gpu_hours_upper"]),
        "bound_gpu_hours": _hours(jobs["bound_gpu_hours"]),
        "load_gpu_hours": float(jobs["load_gpu_hours"].sum()),
        "known_gpu_hours": float(jobs["gpu_hours"].sum()),
        "missing": missing_throughput(jobs),
        "bill": bill.api_bill(config, jobs),
        **counts.benchmark_size(config),
    }


def select_targets(
    config: dict[str, Any],
    domains: Iterable[str] = (),
    models: Iterable[str] = (),
    rules: Iterable[str] = (),
) -> list[str]:
    """Output paths of the sharded jobs in any of `domains`, using any of `models`, of any of `rules`.

    An empty filter matches everything; an unknown name raises ValueError listing the valid ones.
    """
    jobs = job_table(config)
    jobs = jobs[jobs["rule"].isin(list(SHARDED_STEPS))]
    job_models = jobs["models"].str.split(",")
    valid = {
        "domain": sorted(config["domains"]),
        "model": sorted({name for names in job_models for name in names}),
        "rule": list(SHARDED_STEPS),
    }
    for what, given in (("domain", domains), ("model", models), ("rule", rules)):
        unknown = sorted(set(given) - set(valid[what]))
        if unknown:
            raise ValueError(f"unknown {what} {', '.join(unknown)}; valid: {', '.join(valid[what])}")
    keep = pd.Series(True, index=jobs.index)
    if domains := list(domains):
        keep &= jobs["domain"].isin(domains)
    if rules := list(rules):
        keep &= jobs["rule"].isin(rules)
    if models := set(models):
        keep &= job_models.map(lambda names: bool(models & set(names)))
    return jobs.loc[keep, "output"].tolist()


def benchmark_file(benchmark_dir: str | Path, rule: str, job: str) -> Path:
    """Where a job's benchmark TSV is under `benchmark_dir` ({results}/benchmarks), from `targets.PATHS`."""
    full = Path(targets.path({"results_dir": "R", "resources_dir": "R"}, "benchmark", rule=rule, job=job))
    root = Path(targets.path({"results_dir": "R", "resources_dir": "R"}, "benchmark", rule="r", job="j")).parent.parent
    return Path(benchmark_dir) / full.relative_to(root)


def computed_items(counters: str) -> int | None:
    """Items a finished job ran through its model, as its counters file says (`computed_items`): a job
    that resumed (a journal, images already on disk, cached scores) did the rest before, in another
    job's time. None when the job writes no such counter."""
    if not counters or not Path(counters).is_file():
        return None
    return read_json(counters).get("computed_items")


def output_items(config: dict[str, Any], rule: str, output: str) -> int | None:
    """Items a finished job handled, from its output parquet's row count; None when the file is not there."""
    if not Path(output).is_file():
        return None
    try:
        rows = pq.ParquetFile(output).metadata.num_rows
    except pa.ArrowException as error:
        raise ValueError(f"{output}: not a parquet table ({error})") from None
    if rule == "measure_image_quality":  # a row is one pair (two images) under one metric
        return 2 * rows // len(config["image_stage"]["iqa_metrics"])
    if rule == "score_metric":  # a row is one pair: two images
        return 2 * rows
    return rows


def benchmark_seconds(path: Path) -> float:
    """The wall seconds (`s`) of a Snakemake benchmark file; NaN for a file without them (empty, or a
    header only: a job cut short while it was written)."""
    try:
        seconds = pd.read_csv(path, sep="\t").get("s", pd.Series(dtype=float))
    except (pd.errors.EmptyDataError, pd.errors.ParserError):
        return float("nan")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a Snakemake benchmark file (not UTF-8 text: {error.reason})") from None
    value = pd.to_numeric(seconds, errors="coerce").iloc[0] if len(seconds) else float("nan")
    return float(value)


def measured_throughput(config: dict[str, Any], benchmark_dir: str | Path) -> pd.DataFrame:
    """Seconds per item of every benchmarked GPU-rule job: wall seconds (`s`) over items.

    Items are what the job ran through its model, from its counters (`computed_items`) where it counts
    them, so a resumed job is timed over its own work only; else the rows of its output under the run's
    results folder (the parent of `benchmark_dir`); else the plan's upper bound (`items_from` says which).
    A job without items of its own (an empty shard, or every item done before), or whose benchmark file
    has no seconds (`seconds` NaN), has no time per item. A folder that is not there, or that holds no
    benchmark file of the config's jobs, is a ValueError naming it.
    """
    benchmark_dir = Path(benchmark_dir)
    if not benchmark_dir.is_dir():
        what = "not a folder" if benchmark_dir.exists() else "no such folder"
        raise ValueError(f"{benchmark_dir}: {what} (give the {{results_dir}}/benchmarks of a finished run)")
    run = config | {"results_dir": str(benchmark_dir.parent)}
    jobs = job_table(run)
    jobs = jobs[jobs["rule"].isin(THROUGHPUT_STEPS)]
    rows = []
    for _, job in jobs.iterrows():
        path = benchmark_file(benchmark_dir, job["rule"], job["job"])
        if not path.is_file():
            continue
        seconds = benchmark_seconds(path)
        counted, output_rows = computed_items(job["counters"]), output_items(run, job["rule"], job["output"])
        if counted is not None:
            items, items_from = counted, "counters"
        elif output_rows is not None:
            items, items_from = output_rows, "output"
        else:
            items, items_from = int(job["items_upper"]), "plan"
        rows.append(
            {
                "rule": job["rule"],
                "key": job["throughput_key"],
                "benchmark": str(path),
                "seconds": seconds,
                "items": items,
                "items_from": items_from,
                "seconds_per_item": seconds / items if items else float("nan"),
            }
        )
    if not rows:
        expected = (
            f"e.g. {benchmark_file(benchmark_dir, jobs['rule'].iloc[0], jobs['job'].iloc[0])}"
            if len(jobs)
            else "the config has no benchmarked jobs"
        )
        raise ValueError(f"{benchmark_dir}: no benchmark file of this config's jobs ({expected})")
    return pd.DataFrame(
        rows, columns=["rule", "key", "benchmark", "seconds", "items", "items_from", "seconds_per_item"]
    )


def throughput_table(measured: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The median seconds per item of each rule and model, as the config's `throughput:` mapping."""
    table: dict[str, dict[str, float]] = {}
    for (rule, key), group in measured.dropna(subset=["seconds_per_item"]).groupby(["rule", "key"], sort=False):
        table.setdefault(rule, {})[key] = float(f"{statistics.median(group['seconds_per_item']):.4g}")
    return table
