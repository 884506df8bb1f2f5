"""The config checked as a whole, across the modules that know its parts: the schema, the files and
datasets it names, the domains' taxonomies, the models in their roles, the metrics' plug-ins, the
throughput table and what a released dataset's run may ask for. Parsing the workflow, `blindspot
plan`, `doctor` and `evaluate` all check a config here before anything runs."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from blindspot.catalogue import check_throughput
from blindspot.config import SCHEMA_PATH, ConfigError, check_schema, config_value, named_keys, named_values, read_yaml
from blindspot.hub.repos import is_hub_dataset
from blindspot.humblebench.questions import KIND_FIELDS
from blindspot.plugins import (
    PLUGINS,
    PluginError,
    check_plugin,
    model_free_resources,
    plugin_arguments,
    trained_by,
)
from blindspot.prompts import PromptTemplate
from blindspot.protobias.released import check_released_config
from blindspot.protobias.taxonomy import check_n_seeds, load_taxonomy
from blindspot.registry import is_api_model, placed_models

# Keys whose value is a file the run reads ("*": every name at that level), relative to where the run
# starts; a missing one stops the config check rather than the job that first opens it.
CONFIG_FILES = (
    "domains.*.taxonomy",
    "prompt_stage.generate_template",
    "prompt_stage.judge_template",
    "image_stage.judge_template",
    "evaluation.metrics.*.args.template",
    "humblebench.scene_graphs.file",
    "humblebench.scene_graphs.template",
    "humblebench.scene_graphs.verification",
    "humblebench.settings.*.template",
    "humblebench.prompt",
    "models.*.humble_protocol.prompt",
    "humblebench.human_answers",
    "evaluation.human_choices",
    "annotation.image_score_labels",
    "annotation.pairwise_labels",
    "protoscore.transfer",
)
# Keys whose value is a dataset: a local file or folder, or a hub dataset id (`hub.repos.is_hub_dataset`:
# org/name, no table suffix). One that is neither (data/x.jsonl, ./release, a plain name) is a local path
# that is not there.
CONFIG_DATASETS = ("humblebench.release", "dataset.path")
# Every key whose value may be a path, and the folders the run writes and builds in: made absolute for a run
# that starts elsewhere (`absolute_paths`). A model's id or a dataset is a path only when it names one.
CONFIG_PATHS = (*CONFIG_FILES, "results_dir", "resources_dir", "models.*.build.archive")
CONFIG_MAYBE_PATHS = (*CONFIG_DATASETS, "models.*.id")
# The template whose `rubric` people are shown too (the annotation projects' image_score).
RUBRIC_TEMPLATE = "image_stage.judge_template"


def check_files(config: dict[str, Any]) -> None:
    """Raise ConfigError naming the key of the first file (or local dataset) the config names that is not there."""
    for pattern in CONFIG_FILES:
        for key, value in named_values(config, pattern):
            if not Path(value).is_file():
                where = "is not a file" if Path(value).exists() else "does not exist"
                raise ConfigError(f"config key '{key}': {value} {where} (relative paths start at {Path.cwd()})")
            if key.endswith("template"):  # read when the workflow is planned, not after a job's model loads
                try:
                    template = PromptTemplate.load(value)
                except ValueError as error:
                    raise ConfigError(f"config key '{key}': {error}") from None
                if key == RUBRIC_TEMPLATE and ("rubric" not in template.system + template.user or not template.rubric):
                    raise ConfigError(
                        f"config key '{key}': {value} needs a `rubric` that its messages use ({{{{ rubric }}}}): the "
                        "filter evaluators are shown it, so that people and the VLMs score on one rubric"
                    )
    for pattern in CONFIG_DATASETS:
        for key, value in named_values(config, pattern):
            if isinstance(value, str) and not Path(value).exists() and not is_hub_dataset(value):
                raise ConfigError(f"config key '{key}': {value} does not exist (relative paths start at {Path.cwd()})")


def absolute_paths(config: dict[str, Any], start: Path) -> dict[str, Any]:
    """A copy of `config` whose relative paths (`CONFIG_PATHS`, and `CONFIG_MAYBE_PATHS` where they name a
    file or folder) start at `start`: the same run, from any working folder."""
    config = copy.deepcopy(config)
    for patterns, always in ((CONFIG_PATHS, True), (CONFIG_MAYBE_PATHS, False)):
        for pattern in patterns:
            for keys, value in named_keys(config, pattern):
                if isinstance(value, str) and (always or (start / value).exists()):
                    *parents, name = keys
                    functools.reduce(dict.__getitem__, parents, config)[name] = str(start / value)
    return config


def check_taxonomies(config: dict[str, Any]) -> None:
    """Load each domain's taxonomy (one line naming its file and key when it is broken) and check that it
    enumerates the seeds the domain asks for; a config that scores a released dataset (`dataset:`)
    samples none, and its domains' taxonomies are not read."""
    if config.get("dataset"):
        return
    for domain, entry in config["domains"].items():
        check_n_seeds(load_taxonomy(entry["taxonomy"], domain), entry["taxonomy"], domain, entry["n_seeds"])


def validate_config(config: dict[str, Any]) -> None:
    """Raise ConfigError naming the first bad key; check names that refer to the registry and files."""
    check_schema(config, SCHEMA_PATH, "config")
    check_files(config)
    check_taxonomies(config)
    models = config["models"]
    for role, name in placed_models(config):
        if name not in models:
            raise ConfigError(
                f"config key '{role.key}': model '{name}' is not in the registry (models: {', '.join(sorted(models))})"
            )
        if models[name]["backend"] not in role.backends:
            raise ConfigError(
                f"config key 'models.{name}.backend': '{models[name]['backend']}' cannot "
                f"serve as {role.key.rsplit('.', 1)[1]} (expected one of {', '.join(role.backends)})"
            )
    if config["annotation"].get("pairwise_labels") and config["evaluation"].get("human_choices"):
        raise ConfigError(
            "config keys 'annotation.pairwise_labels' and 'evaluation.human_choices' both give Table 3's human "
            "majority: keep one"
        )
    for name, entry in models.items():
        # A job's host memory is sized by its weights (blindspot.resources); built models are tiny.
        if "id" in entry and not is_api_model(entry) and "weights_gb" not in entry:
            raise ConfigError(
                f"config key 'models.{name}.weights_gb': missing; the size of the weight files its jobs read "
                "(GB) sizes their memory on a cluster"
            )
        lender = entry.get("build", {}).get("tokenizer_from")
        if lender is not None and (not isinstance(lender, str) or lender not in models):
            raise ConfigError(
                f"config key 'models.{name}.build.tokenizer_from': model '{lender}' is not in the registry "
                f"(models: {', '.join(sorted(models))})"
            )
    humble = config["humblebench"]
    for use, setting in humble["tables"].items():
        if setting not in humble["settings"]:
            raise ConfigError(
                f"config key 'humblebench.tables.{use}': '{setting}' is not one of the settings "
                f"({', '.join(humble['settings'])})"
            )
    listed = {f"models.{vlm}.humble_settings": config["models"][vlm].get("humble_settings") for vlm in humble["vlms"]}
    groups = humble.get("group_settings") or {}
    listed |= {f"humblebench.group_settings.{group}": names for group, names in groups.items()}
    for key, names in listed.items():
        unknown = [name for name in names or [] if name not in humble["settings"]]
        if unknown:
            raise ConfigError(
                f"config key '{key}': '{unknown[0]}' is not one of the settings ({', '.join(humble['settings'])})"
            )
    for name, kind in ((humble.get("from_benchmark") or {}).get("kinds") or {}).items():
        try:
            kind["text"].format(**dict.fromkeys(KIND_FIELDS, ""))
        except (KeyError, IndexError, ValueError) as error:  # a field it does not have, {0}, a lone brace
            raise ConfigError(
                f"config key 'humblebench.from_benchmark.kinds.{name}.text': cannot fill in {error} "
                f"(it may use {', '.join('{' + field + '}' for field in KIND_FIELDS)})"
            ) from None
    check_throughput(config)
    evaluation = config["evaluation"]
    for name, metric in evaluation["metrics"].items():
        try:
            check_plugin(metric["plugin"])
        except PluginError as error:
            raise ConfigError(f"config key 'evaluation.metrics.{name}.plugin': {error}") from None
        takes = plugin_arguments(metric["plugin"])
        given = [f"{part}.{arg}" for part in ("args", "models") for arg in metric.get(part, {})]
        unknown = [key for key in given if takes is not None and key.split(".", 1)[1] not in takes]
        if unknown:  # else the job dies on a TypeError after loading its model
            raise ConfigError(
                f"config key 'evaluation.metrics.{name}.{unknown[0]}': {metric['plugin']} takes no argument "
                f"'{unknown[0].split('.', 1)[1]}' (it takes {', '.join(takes) or 'none'})"
            )
        check_metric_model(name, metric)
        own = {"model": metric["model"]} if "model" in metric else {}
        named = own | {f"models.{arg}": m for arg, m in metric.get("models", {}).items()}
        for key, model in named.items():
            if model not in models:
                raise ConfigError(
                    f"config key 'evaluation.metrics.{name}.{key}': model '{model}' is not in the registry "
                    f"(models: {', '.join(sorted(models))})"
                )
        # Its jobs run where its own model does: an API model's on the submit host (the network, no GPU),
        # another's on compute nodes (GPUs, no network); a helper of the other kind could not run there.
        # (A metric without a model of its own runs on compute nodes.)
        served = {key: is_api_model(models[model]) for key, model in named.items()}
        mixed = [key for key, is_api in served.items() if is_api != served.get("model", False)]
        if mixed:
            kind, where = (
                ("no", "the submit host, without GPUs")
                if served.get("model")
                else ("an", "compute nodes, without the network")
            )
            runs = f"where its own model '{metric['model']}' does" if own else "as it loads no registry model"
            raise ConfigError(
                f"config key 'evaluation.metrics.{name}.{mixed[0]}': '{named[mixed[0]]}' is {kind} "
                f"API model, but the metric's jobs run on {where}, {runs}"
            )
        if metric["family"] not in evaluation["families"]:
            raise ConfigError(
                f"config key 'evaluation.metrics.{name}.family': '{metric['family']}' is not one of the families "
                f"({', '.join(evaluation['families'])})"
            )
        # a trained scorer's adapters fit only the model they were trained on
        trained = trained_by(metric["plugin"])
        if trained and metric["model"] != config_value(config, trained.model_key):
            raise ConfigError(
                f"config key 'evaluation.metrics.{name}.model': '{metric['model']}' is not the model "
                f"{trained.step} trains ({trained.model_key}: '{config_value(config, trained.model_key)}')"
            )
    # With `dataset:` nothing is built: nothing may ask for what only building gives (after the plug-ins
    # are found, since it reads what they declare).
    check_released_config(config)


def check_metric_model(name: str, metric: dict[str, Any]) -> None:
    """A metric's `model`, or its `resources` instead: a built-in plug-in (imported here, unlike one from
    outside) needs its model; `resources` size the jobs of a metric that has none, and only those."""
    if "model" in metric and "resources" in metric:
        raise ConfigError(
            f"config key 'evaluation.metrics.{name}.resources': only for a metric without `model`; its model's "
            f"registry entry ('{metric['model']}') sizes its jobs"
        )
    if "model" not in metric and metric["plugin"] in PLUGINS and model_free_resources(metric["plugin"]) is None:
        raise ConfigError(
            f"config key 'evaluation.metrics.{name}.model': missing; {metric['plugin']} loads a "
            "registry model (name its entry under `models`)"
        )


def load_config(path: str | Path) -> dict[str, Any]:
    config = read_yaml(path)
    validate_config(config)
    return config
