# Parse-time work only: validate the config, constrain wildcards, define input functions.
import dataclasses
import functools
import os
import re
import sys
from pathlib import Path

# The workflow imports the package from this checkout; jobs do too, through the link
# workflow/scripts/blindspot -> src/blindspot (Snakemake puts a script's folder on sys.path).
sys.path.insert(0, str(Path(workflow.basedir).parent / "src"))

from blindspot.checks import validate_config
from blindspot.config import ConfigError, check_config_files
from blindspot.models.spec import build_inputs, model_spec, resolved_recipe
from blindspot.registry import api_vlms, is_api_metric, metric_models
from blindspot import bill, catalogue, targets
from blindspot.humblebench.parsing import PARSER_VERSION
from blindspot.plugins import plugin_code, trained_metric_input
from blindspot.protobias.metric_scores import metric_score_settings
from blindspot.resources import job_resources
from blindspot.tiny.build import recipe_seed

# Snakemake reads the config files itself and keeps the last of a key given twice: read them again.
# A bad config stops the run with the line that names its key or file, and no traceback of the check
# (still a ConfigError: `blindspot plan` runs this workflow in-process and reports it).
try:
    check_config_files(workflow.configfiles)
    validate_config(config)
except ConfigError as error:
    raise error.with_traceback(None) from None

STAGE = config["prompt_stage"]
BUILT_MODELS = [name for name, entry in config["models"].items() if "build" in entry]
METRICS = config["evaluation"]["metrics"]
# Metrics served over the internet; compute nodes have none, so their jobs run on the submit host.
API_METRICS = [name for name in METRICS if is_api_metric(config, name)]
# HumbleBench's VLMs served by an endpoint: their answer jobs run on the submit host too.
API_VLMS = api_vlms(config)


@functools.cache
def metric_plugin_code(metric):
    """The metric's plug-in code (`plugin_code`), found once per metric, not once per job."""
    return plugin_code(METRICS[metric]["plugin"])


def _one_of(names):
    return "|".join(re.escape(name) for name in names) or "^$"


wildcard_constraints:
    domain=_one_of(config["domains"]),
    generator=_one_of(STAGE["generators"]),
    judge=_one_of(STAGE["judges"]),
    t2i=_one_of(config["image_stage"]["t2i_models"]),
    vlm=_one_of({*config["image_stage"]["vlms"], *config["humblebench"]["vlms"]}),
    setting=_one_of(config["humblebench"]["settings"]),
    model=_one_of(BUILT_MODELS),
    metric=_one_of(METRICS),
    shard=r"\d{5}",


def P(kind, **fields):
    return targets.path(config, kind, **fields)


def LOG(rule):
    """A job's log: its name is the step's wildcards (`blindspot.catalogue`)."""
    return P("log", rule=rule, job=catalogue.job_name(rule))


def BENCH(rule):
    return P("benchmark", rule=rule, job=catalogue.job_name(rule))


def get_final_output():
    return targets.final_targets(config)


def get_model_input(name):
    """The built model directory a job reads, or nothing for a hub model."""
    return [P("model", model=name)] if name in BUILT_MODELS else []


def get_role_model_input(role):
    return lambda wildcards: get_model_input(getattr(wildcards, role))


def _job_resources(rule, wildcards, attempt=1):
    return _resources_of(rule, tuple(sorted(wildcards.items())), attempt)


# Snakemake asks for each job's threads and resources one at a time, and again when it prints the job:
# a job's resources are worked out once (the config does not change during a run).
@functools.cache
def _resources_of(rule, wildcards, attempt):
    return job_resources(config, rule, dict(wildcards), attempt)


def get_threads(rule):
    """A job's CPUs (`blindspot.resources`): Snakemake asks SLURM for them and sets OMP_NUM_THREADS to them."""
    return lambda wildcards: _job_resources(rule, wildcards).threads


def _site_gpu_model():
    """The GPU model a site names in its profile's default-resources (`gpu_model: h100`), or None."""
    defaults = workflow.resource_settings.default_resources
    model = defaults.get("gpu_model") if defaults is not None else None
    return None if model is None else model.raw


SITE_GPU_MODEL = _site_gpu_model()


def get_resources(rule):
    """A job's GPUs (also vLLM's tensor parallelism), memory and time (`blindspot.resources`); memory
    and time grow with the attempt. Every job is one process on one node: without `nodes`, SLURM may
    spread a job's GPUs (`--gpus`) over two nodes, and the job would see only its own node's.

    A job that uses no GPU has neither `gpu` nor `gpu_model` (a resource that is None is dropped): the
    SLURM plugin turns a `gpu_model` alone into `--gpus=MODEL:1`, and Kubernetes' and the cloud executors
    take any job with a `gpu` key for a GPU job. The site's `gpu_model` goes to GPU jobs only."""
    return {
        "nodes": 1,
        "gpu": lambda wildcards: _job_resources(rule, wildcards).gpus or None,
        "gpu_model": lambda wildcards: SITE_GPU_MODEL if _job_resources(rule, wildcards).gpus else None,
        "mem_mb": lambda wildcards, attempt: _job_resources(rule, wildcards, attempt).mem_mb,
        "runtime": lambda wildcards, attempt: _job_resources(rule, wildcards, attempt).runtime,
    }


def after_earlier_vlms(value):
    """A param of a filter VLM's job that scores after earlier ones (`targets.earlier_filter_vlms`); None for
    one that scores every image, which does not read it."""
    return lambda wildcards: value if targets.earlier_filter_vlms(config, wildcards.vlm) else None


def get_env(rule):
    """A job's conda env (`blindspot.catalogue`): by step, and for VLMs and metrics by the model's backend."""
    return lambda wildcards: f"../envs/{catalogue.job_env(config, rule, dict(wildcards.items()))}.yaml"


def get_api_key_is_set(wildcards):
    """Whether the key of the job's API model (a metric's, or an API VLM's) is in the environment (never
    the key): setting it later re-runs the jobs that were skipped without it."""
    named = dict(wildcards.items())
    model = METRICS[named["metric"]].get("model") if "metric" in named else named["vlm"]
    variable = model and config["models"][model].get("api_key_env")
    return bool(variable and os.environ.get(variable))


@functools.cache
def model_spec_params(name):
    """A model as its step takes it: the resolved registry entry (`blindspot.steps.spec` reads it), so
    editing the entry, or `allow_cpu`, re-runs the model's jobs. Worked out once per model; no step
    changes it."""
    return dataclasses.asdict(model_spec(config, name))


def get_metric_model_spec(wildcards):
    """The spec of a metric's registry model; None for a plug-in that loads none."""
    name = METRICS[wildcards.metric].get("model")
    return None if name is None else model_spec_params(name)


def get_model_spec(role):
    """The spec of the model a wildcard names (`t2i`, `vlm`, ...)."""
    return lambda wildcards: model_spec_params(getattr(wildcards, role))


SCENE_GRAPHS = config["humblebench"].get("scene_graphs") or {}


def get_release_input():
    """HumbleBench's release when it is a local copy (a file or a saved folder), so that a new copy
    re-runs the questions; a hub id is not a path and stays a param."""
    release = config["humblebench"].get("release")
    return [release] if release and Path(release).exists() else []


ANNOTATION = config["annotation"]


def get_human_choices(wildcards):
    """Table 3's human majority: from people's pairwise labels, or a CSV the config names."""
    if ANNOTATION.get("pairwise_labels"):
        return [P("human_majority")]
    return [config["evaluation"]["human_choices"]] if config["evaluation"].get("human_choices") else []


def humble_input(kind):
    """A HumbleBench input that exists only when its source is configured."""
    settings = config["humblebench"]
    if kind == "benchmark":
        return [P("benchmark_pairs")] if settings.get("from_benchmark") else []
    if kind == "scene_questions":
        return [P("scene_questions")] if SCENE_GRAPHS else []
    if kind == "human_study":
        return [P("human_study")] if settings.get("human_study") else []
    return [settings["human_answers"]] if settings.get("human_answers") else []


def humble_tables(kind):
    """A HumbleBench table's CSV, Markdown and LaTeX files, the CSV shown in the report."""
    csv, *others = targets.table_targets(config, kind)
    return [report(csv, caption="../report/humblebench.rst", category="HumbleBench"), *others]


def get_metric_template(wildcards):
    """A judge metric's prompt template (a file it reads), none for the others."""
    args = METRICS[wildcards.metric].get("args", {})
    return [args["template"]] if "template" in args else []


# An API metric scores only the annotated test pairs, the ones Table 3 reads, unless the config asks for the
# whole split (`evaluation.api_metrics_score`); a released dataset has no annotated subset (docs/metrics.md).
ANNOTATED_ONLY = targets.annotated_only_metrics(config)
if "dataset" in config and API_METRICS and config["evaluation"].get("api_metrics_score") != targets.TEST_SPLIT:
    logger.info(f"API metrics {', '.join(API_METRICS)} score the whole test split: a dataset has no annotated pairs")


def get_annotated_pairs(wildcards):
    """The annotated pairs a metric's jobs score, when it scores only them; else nothing (the whole test split)."""
    return [P("preference_pairs")] if wildcards.metric in ANNOTATED_ONLY else []


def included_local_steps():
    """The catalogue's local steps among the rules this config includes (with `dataset:` the building
    rules are left out)."""
    included = {rule.name for rule in workflow.rules}
    return [step for step in catalogue.LOCAL_STEPS if step in included]


# A released ProtoBias benchmark (`dataset:`) instead of a built one: scoring reads the imported tables.
DATASET = config.get("dataset") or {}


def scored(kind):
    """A table the scoring rules read: the imported dataset's with `dataset:`, else the built one."""
    return P(f"imported_{kind}" if "dataset" in config else kind)


def get_dataset_input():
    """The dataset when it is a local copy, so that a new copy re-imports it; a hub id stays a param."""
    source = DATASET.get("path")
    return [source] if source and Path(source).exists() else []
