"""Plan a run before it starts: jobs per rule, GPU-hours per stage, targets for partial re-runs.

Every job of the workflow is listed here as one row, with the same sharding as the rules (a shard
is a slice of a domain's sorted seeds), the same GPU request (`step_gpus`) and the same
output paths (`targets.path`). GPU-hours come from the config's `throughput:` table (seconds per
item per rule and model); a missing entry gives `n/a` and is named, never a guessed number.
`measured_throughput` turns the benchmark files of a finished run into such a table.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from blindspot import targets
from blindspot.config import (
    MODEL_ROLES,
    SCENE_GRAPH_ROLES,
    ConfigError,
    metric_models,
    metric_rule,
    shard_names,
    shard_slice,
)
from blindspot.resources import JobResources, job_resources

STAGES = {
    "build_model": "models",
    "make_seeds": "prompt",
    "generate_triplets": "prompt",
    "judge_triplets": "prompt",
    "accept_triplets": "prompt",
    "check_prompt_quality": "prompt",
    "make_table1": "prompt",
    "render_images": "image",
    "judge_images": "image",
    "keep_consensus_pairs": "image",
    "measure_image_quality": "image",
    "make_table2": "image",
    "split_benchmark": "benchmark",
    "export_dataset": "benchmark",
    "score_metric": "metrics",
    "score_api_metric": "metrics",
    "make_table3": "metrics",
    "write_scene_questions": "humblebench",
    "make_humble_questions": "humblebench",
    "answer_humble": "humblebench",
    "make_humble_tables": "humblebench",
    "train_protoscore": "protoscore",
    "score_transfer": "protoscore",
    "make_annotation_projects": "annotation",
    "validate_filter": "annotation",
    "human_preferences": "annotation",
    "make_report_items": "benchmark",
    "all": "benchmark",
}
# The wildcards of each rule's `log:`/`benchmark:` job name, in order (workflow/rules/*.smk; a test
# checks the two agree). The first model wildcard is the model a job's throughput is looked up by.
JOB_WILDCARDS = {
    "build_model": ("model",),
    "make_seeds": ("domain",),
    "generate_triplets": ("domain", "generator", "shard"),
    "judge_triplets": ("domain", "judge", "generator", "shard"),
    "check_prompt_quality": ("domain",),
    "render_images": ("domain", "t2i", "shard"),
    "judge_images": ("domain", "t2i", "vlm", "shard"),
    "measure_image_quality": ("domain", "shard"),
    "export_dataset": (),
    "score_metric": ("domain", "metric", "shard"),
    "score_api_metric": ("domain", "metric", "shard"),
    "write_scene_questions": (),
    "make_humble_questions": (),
    "answer_humble": ("vlm", "setting", "shard"),
    "train_protoscore": (),
    "score_transfer": (),
}
# Sharded rules, the kind of their main output, and which wildcard is the job's model.
SHARDED = {
    "generate_triplets": ("raw_triplets", "generator"),
    "judge_triplets": ("judgments", "judge"),
    "render_images": ("renders", "t2i"),
    "judge_images": ("vlm_scores", "vlm"),
    "measure_image_quality": ("image_quality", None),
    "score_metric": ("metric_scores", "metric"),
    "score_api_metric": ("metric_scores", "metric"),
}
# The wildcard naming the one model a job runs (and is looked up by in `throughput:`).
MODEL_WILDCARD = {
    "build_model": "model",
    "answer_humble": "vlm",
    "train_protoscore": "model",
    "score_transfer": "model",
} | {rule: wildcard for rule, (_, wildcard) in SHARDED.items() if wildcard}
# Rules whose one job runs several models in turn: their throughput is per job, under `default`.
MULTI_MODEL = {"check_prompt_quality", "measure_image_quality", "write_scene_questions"}
# Rules that run a model on a GPU: the keys the `throughput:` table may have.
THROUGHPUT_RULES = (
    "generate_triplets",
    "judge_triplets",
    "check_prompt_quality",
    "render_images",
    "judge_images",
    "measure_image_quality",
    "score_metric",
    "write_scene_questions",
    "answer_humble",
    "train_protoscore",
    "score_transfer",
)
ITEMS_NOTE = (
    "Items are upper bounds: seeds per shard for the prompt stage; for images 2 x seeds x generators x "
    "images_per_description per T2I model (every generator's triplet of a seed accepted), and for image "
    "quality that times the T2I models (every pair kept). Filtering before a stage only lowers them. "
    "HumbleBench answers: the release's questions (`release_questions`) and two per benchmark image, per shard."
)
COLUMNS = ["stage", "rule", "domain", "model", "models", "shard", "items", "gpus", "threads", "mem_mb", "runtime",
           "output"]


def _shard_seeds(config: dict[str, Any], domain: str) -> dict[str, int]:
    """Seeds in each shard of `domain`: the sizes of the slices the stages take."""
    seeds = range(config["domains"][domain]["n_seeds"])
    return {
        shard: len(seeds[shard_slice(shard, config["shard_size"])]) for shard in targets.domain_shards(config, domain)
    }


def needed_built_models(config: dict[str, Any]) -> list[str]:
    """Registry entries with `build:` that the run reads, with the built models their recipes borrow from."""
    names = []
    for stage, role in MODEL_ROLES:
        value = config[stage][role]
        names.extend([value] if isinstance(value, str) else value)
    names.extend(name for metric in config["evaluation"]["metrics"].values() for name in metric_models(metric))
    names.extend((config["humblebench"].get("scene_graphs") or {}).get(role) for role in SCENE_GRAPH_ROLES)
    names = [name for name in names if name]
    needed: list[str] = []
    while names:
        name = names.pop(0)
        entry = config["models"][name]
        if "build" in entry and name not in needed:
            needed.append(name)
            if "tokenizer_from" in entry["build"]:
                names.append(entry["build"]["tokenizer_from"])
    return sorted(needed)


def job_table(config: dict[str, Any]) -> pd.DataFrame:
    """One row per job of a run from scratch: what `snakemake -n --forceall` plans, with items and GPUs."""
    stage, image = config["prompt_stage"], config["image_stage"]
    generators, judges, t2is, vlms = stage["generators"], stage["judges"], image["t2i_models"], image["vlms"]
    per_seed_images = 2 * len(generators) * image["images_per_description"]
    rows: list[dict[str, Any]] = []

    def add(rule: str, output: str, items: int | None, domain: str = "", shard: str = "", **models: str):
        model = models.get(MODEL_WILDCARD.get(rule, ""), "")
        resources = job_resources(config, rule, models, items, throughput_key=throughput_key(rule, model))
        rows.append(
            {
                "stage": STAGES[rule],
                "rule": rule,
                "domain": domain,
                "model": model,
                "models": ",".join(models.values()),
                "shard": shard,
                "items": items,
                **resources.as_dict(),
                "output": output,
            }
        )

    def p(kind: str, **fields: str) -> str:
        return targets.path(config, kind, **fields)

    metrics = config["evaluation"]["metrics"]
    # Sharded rules: the model lists a job is one combination of, and items per seed (images for
    # the image stage: every generator's triplet accepted, every pair kept; an upper bound).
    sharded = [
        ("generate_triplets", {"generator": generators}, 1),
        ("judge_triplets", {"judge": judges, "generator": generators}, 1),
        ("render_images", {"t2i": t2is}, per_seed_images),
        ("judge_images", {"t2i": t2is, "vlm": vlms}, per_seed_images),
        ("measure_image_quality", {}, per_seed_images * len(t2is)),
        ("score_metric", {"metric": list(metrics)}, per_seed_images * len(t2is)),
    ]
    # Models a job loads that no wildcard names, listed so that `targets --model` finds the job.
    also_loads = {
        "measure_image_quality": lambda named: {f"iqa{i}": n for i, n in enumerate(image["iqa_metrics"])},
        "score_metric": lambda named: {"metric_model": metrics[named["metric"]]["model"]},
    }

    for name in needed_built_models(config):
        add("build_model", p("model", model=name), 1, model=name)
    for domain, spec in config["domains"].items():
        n_seeds, shards = spec["n_seeds"], _shard_seeds(config, domain)
        d = {"domain": domain}
        add("make_seeds", p("seeds", **d), n_seeds, **d)
        for rule, models, per_seed in sharded:
            for combination in itertools.product(*models.values()):
                named = dict(zip(models, combination, strict=True))
                extra = also_loads.get(rule, lambda named: {})(named)
                job_rule = metric_rule(config, named["metric"]) if rule == "score_metric" else rule
                for shard, seeds in shards.items():
                    output = p(SHARDED[rule][0], **d, **named, shard=shard)
                    add(job_rule, output, seeds * per_seed, **d, shard=shard, **named, **extra)
        add("accept_triplets", p("triplets", **d), n_seeds * len(generators), **d)
        add(
            "check_prompt_quality",
            p("prompt_quality", **d),
            n_seeds * len(generators),
            **d,
            embedding_model=stage["embedding_model"],
            nli_model=stage["nli_model"],
        )
        add("keep_consensus_pairs", p("pairs", **d), n_seeds * per_seed_images // 2 * len(t2is), **d)
    add("make_table1", targets.table_targets(config, "table1")[0], None)
    add("make_table2", targets.table_targets(config, "table2")[0], None)
    add("split_benchmark", p("benchmark_pairs"), None)
    add("export_dataset", p("dataset"), None)
    add("make_table3", targets.table_targets(config, "table3")[0], None)
    humble = config["humblebench"]
    if humble.get("scene_graphs"):
        scene = humble["scene_graphs"]
        add("write_scene_questions", p("scene_questions"), None, describer=scene["describer"], writer=scene["writer"])
    add("make_humble_questions", p("humble_questions"), None)
    images = sum(spec["n_seeds"] for spec in config["domains"].values()) * per_seed_images * len(t2is)
    questions = humble.get("release_questions", 0) + (2 * images if humble.get("from_benchmark") else 0)
    per_shard = -(-questions // humble["answer_shards"])
    for vlm, setting in itertools.product(humble["vlms"], humble["settings"]):
        for shard in shard_names(humble["answer_shards"], 1):
            add("answer_humble", p("humble_answers", vlm=vlm, setting=setting, shard=shard), per_shard,
                shard=shard, vlm=vlm, setting=setting)  # fmt: skip
    add("make_humble_tables", p("humble_metrics"), None)
    trainer = config["protoscore"]["model"]
    pairs = images // 2
    add("train_protoscore", p("protoscore"), round(pairs * (1 - config["benchmark"]["test_fraction"])), model=trainer)
    if config["protoscore"].get("transfer"):
        add("score_transfer", p("protoscore_transfer"), None, model=trainer)
    add("make_annotation_projects", p("annotation_projects"), None)
    add("make_report_items", p("example_grid"), None)
    if config["annotation"].get("image_score_labels"):
        add("validate_filter", targets.table_targets(config, "filter_agreement")[0], None)
    if config["annotation"].get("pairwise_labels"):
        add("human_preferences", p("human_majority"), None)
    add("all", "", None)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame = frame.sort_values("rule", key=lambda rules: rules.map(list(STAGES).index), kind="stable")
    frame["items"] = frame["items"].astype("Int64")
    return frame.reset_index(drop=True)


def throughput_key(rule: str, model: str) -> str:
    """The `throughput:` entry a job is looked up by: its model, or `default` for multi-model jobs."""
    return "default" if rule in MULTI_MODEL or not model else model


def check_throughput(config: dict[str, Any]) -> None:
    """Refuse entries for models that are not in the registry (a typo would otherwise read as missing)."""
    for rule, entries in config.get("throughput", {}).items():
        # score_metric jobs are looked up by metric name, the others by registry model.
        known = config["evaluation"]["metrics"] if rule == "score_metric" else config["models"]
        for name in entries:
            if name != "default" and name not in known:
                raise ConfigError(
                    f"config key 'throughput.{rule}.{name}': '{name}' is not one of "
                    f"{', '.join(sorted(known))} nor 'default'"
                )


def with_gpu_hours(config: dict[str, Any], jobs: pd.DataFrame) -> pd.DataFrame:
    """Add `seconds_per_item` and `gpu_hours` (items x seconds x GPUs / 3600); NaN where the table has no entry.

    A rule's `default` stands in for its models without an entry of their own. CPU-only jobs are 0.
    """
    check_throughput(config)
    table = config.get("throughput", {})
    jobs = jobs.copy()
    keys = [throughput_key(rule, model) for rule, model in zip(jobs["rule"], jobs["model"], strict=True)]
    seconds = []
    for rule, key, gpus in zip(jobs["rule"], keys, jobs["gpus"], strict=True):
        entries = table.get(rule, {})
        seconds.append(0.0 if gpus == 0 else entries.get(key, entries.get("default", float("nan"))))
    jobs["throughput_key"] = keys
    jobs["seconds_per_item"] = pd.Series(seconds, index=jobs.index, dtype=float)
    jobs["gpu_hours"] = jobs["items"].astype(float).fillna(0) * jobs["seconds_per_item"] * jobs["gpus"] / 3600
    return jobs


def missing_throughput(jobs: pd.DataFrame) -> list[str]:
    """`rule.model` of every throughput entry that GPU jobs need and the table lacks."""
    missing = jobs[jobs["gpu_hours"].isna()]
    return sorted({f"{rule}.{key}" for rule, key in zip(missing["rule"], missing["throughput_key"], strict=True)})


def _hours(values: pd.Series) -> float:
    return float(values.sum(skipna=False))


def summarize(jobs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Jobs, GPUs per job, items and GPU-hours (NaN when any job lacks a throughput entry) per group."""
    groups = jobs.groupby(by, sort=False)
    return groups.agg(
        jobs=("rule", "size"),
        gpus_per_job=("gpus", _span),
        cpus_per_job=("threads", _span),
        mem_gb_per_job=("mem_mb", lambda m: _span((m / 1024).round(1))),
        hours_per_job=("runtime", lambda r: _span((r / 60).round(1))),
        items=("items", lambda i: i.sum() if i.notna().any() else pd.NA),
        gpu_hours=("gpu_hours", _hours),
    ).reset_index()


def _span(values: pd.Series) -> str:
    """One value, or the least and the most: "8" or "4-16"."""
    low, high = values.min(), values.max()
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def plan(config: dict[str, Any]) -> dict[str, Any]:
    """Everything `blindspot plan` prints: per-rule, per (rule, domain, model) and per-stage tables, total."""
    jobs = with_gpu_hours(config, job_table(config))
    return {
        "jobs": jobs,
        "rules": summarize(jobs, ["stage", "rule"]),
        "combinations": summarize(jobs[jobs["rule"].isin(list(SHARDED))], ["rule", "domain", "model"]),
        "stages": summarize(jobs, ["stage"])[["stage", "jobs", "gpu_hours"]],
        "total_jobs": len(jobs),
        "total_gpu_hours": _hours(jobs["gpu_hours"]),
        "known_gpu_hours": float(jobs["gpu_hours"].sum()),
        "missing": missing_throughput(jobs),
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
    jobs = jobs[jobs["rule"].isin(list(SHARDED))]
    job_models = jobs["models"].str.split(",")
    valid = {
        "domain": sorted(config["domains"]),
        "model": sorted({name for names in job_models for name in names}),
        "rule": list(SHARDED),
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


def job_name(rule: str, job: pd.Series) -> str:
    """The `{job}` part of a job's log and benchmark path, as the rule spells it."""
    names = job["models"].split(",")
    fields = {"domain": job["domain"], "shard": job["shard"]}
    model_wildcards = [w for w in JOB_WILDCARDS[rule] if w not in fields]
    fields |= dict(zip(model_wildcards, names, strict=False))
    return "/".join(fields[w] for w in JOB_WILDCARDS[rule]) or "all"


class PlannedJobs:
    """The plan's jobs by rule and job name, so that a rule's job finds its items (for its time)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        jobs = job_table(config)
        records = jobs[jobs["rule"].isin(list(JOB_WILDCARDS))].to_dict("records")
        self.jobs = {(job["rule"], job_name(job["rule"], job)): job for job in records}

    def resources(self, rule: str, wildcards: dict[str, str], attempt: int = 1) -> JobResources:
        job = self.jobs.get((rule, "/".join(wildcards[w] for w in JOB_WILDCARDS.get(rule, ())) or "all"))
        items = None if job is None or pd.isna(job["items"]) else int(job["items"])
        model = job["model"] if job is not None else ""
        return job_resources(self.config, rule, wildcards, items, attempt, throughput_key(rule, model))


def benchmark_file(benchmark_dir: str | Path, rule: str, job: str) -> Path:
    """Where a job's benchmark TSV is under `benchmark_dir` ({results}/benchmarks), from `targets.PATHS`."""
    full = Path(targets.path({"results_dir": "R", "resources_dir": "R"}, "benchmark", rule=rule, job=job))
    root = Path(targets.path({"results_dir": "R", "resources_dir": "R"}, "benchmark", rule="r", job="j")).parent.parent
    return Path(benchmark_dir) / full.relative_to(root)


def output_items(config: dict[str, Any], rule: str, output: str) -> int | None:
    """Items a finished job handled, from its output parquet's row count; None when the file is not there."""
    if not Path(output).is_file():
        return None
    rows = pq.ParquetFile(output).metadata.num_rows
    if rule == "measure_image_quality":  # a row is one pair (two images) under one metric
        return 2 * rows // len(config["image_stage"]["iqa_metrics"])
    if rule == "score_metric":  # a row is one pair: two images
        return 2 * rows
    return rows


def measured_throughput(config: dict[str, Any], benchmark_dir: str | Path) -> pd.DataFrame:
    """Seconds per item of every benchmarked GPU-rule job: wall seconds (`s`) over items.

    Items come from the job's output parquet under the run's results folder (the parent of
    `benchmark_dir`) when it is there, else from the plan's upper bound (`items_from` says which).
    """
    benchmark_dir = Path(benchmark_dir)
    run = config | {"results_dir": str(benchmark_dir.parent)}
    jobs = job_table(run)
    rows = []
    for _, job in jobs[jobs["rule"].isin(THROUGHPUT_RULES)].iterrows():
        path = benchmark_file(benchmark_dir, job["rule"], job_name(job["rule"], job))
        if not path.is_file():
            continue
        seconds = float(pd.read_csv(path, sep="\t")["s"].iloc[0])
        items = output_items(run, job["rule"], job["output"])
        items_from = "output" if items is not None else "plan"
        items = items if items is not None else int(job["items"])
        rows.append(
            {
                "rule": job["rule"],
                "key": throughput_key(job["rule"], job["model"]),
                "benchmark": str(path),
                "seconds": seconds,
                "items": items,
                "items_from": items_from,
                "seconds_per_item": seconds / items if items else float("nan"),
            }
        )
    return pd.DataFrame(
        rows, columns=["rule", "key", "benchmark", "seconds", "items", "items_from", "seconds_per_item"]
    )


def throughput_table(measured: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The median seconds per item of each rule and model, as the config's `throughput:` mapping."""
    table: dict[str, dict[str, float]] = {}
    for (rule, key), group in measured.dropna(subset=["seconds_per_item"]).groupby(["rule", "key"], sort=False):
        table.setdefault(rule, {})[key] = float(f"{statistics.median(group['seconds_per_item']):.4g}")
    return table
