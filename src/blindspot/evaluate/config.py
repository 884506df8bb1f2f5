"""The config `blindspot evaluate` runs: the base config with `dataset:` (a released ProtoBias) or
`humblebench.release`, the metrics or VLMs it scores, and nothing else to build. Paths on the command
line are read from the current folder; the config's own relative paths are the checkout's."""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from blindspot.config import ConfigError
from blindspot.paths import CHECKOUT

# The base config without --configfile, in the checkout.
DEFAULT_CONFIG = "config/tiny.yaml"


def model_entry(config: dict[str, Any], name: str, plugin: str | None = None) -> str:
    """`name` as a registry name, or a model's folder or hub id whose entry is derived from its files
    (`models.derived`), added to the config and written to stderr so that it can be pasted into one: a VLM of
    HumbleBench's, or the model of `plugin`, which reads images where it declares so (its `VLMS`)."""
    from huggingface_hub import constants

    from blindspot.models.derived import derived_entry, derived_name, is_model_source
    from blindspot.plugins import plugin_declaration

    if name in config["models"]:
        return name
    registered = [known for known, entry in config["models"].items() if entry.get("id") in (name, name.rstrip("/"))]
    if registered:  # the registry's entry of that model, with its protocol and resources
        sys.stderr.write(f"blindspot evaluate: {name} is models.{registered[0]} of the config\n")
        return registered[0]
    if not is_model_source(name):
        raise ConfigError(
            f"model {name}: not in the config's registry, nor a model's folder (with its config.json) or a hub id"
        )
    reads_images, loader = True, None
    if plugin is not None:
        declared = plugin_declaration(plugin, "VLMS", {})
        reads_images, loader = "model" in declared, declared.get("model")
    entry = derived_entry(name, config, constants.HF_HUB_CACHE, reads_images, loader)
    derived = derived_name(name, config["models"])
    config["models"][derived] = entry
    pasted = yaml.safe_dump({derived: entry}, sort_keys=False, default_flow_style=False)
    sys.stderr.write(
        f"blindspot evaluate: models.{derived} derived from {name}'s config.json (paste it under a config's models: "
        "to keep it):\n" + "".join(f"  {line}\n" for line in pasted.splitlines())
    )
    return derived


# `--metric PLUGIN@none`: a plug-in that loads no registry model, said on the command line.
NO_MODEL = "none"


def model_free_entry(metric: str, known: Sequence[str]) -> dict[str, Any]:
    """What a `--metric` without `@` that is no metric of the config puts in its entry instead of a model:
    the `resources` its plug-in's class declares with `registry_model = False`. The plug-in is imported to
    read them (`model_free_resources`); one that cannot be imported here (its packages only in its job's
    env) is named with `@MODEL`, or `@none` for a CPU job."""
    from blindspot.plugins import PluginError, model_free_resources

    hint = f"name the plug-in's model as {metric}@MODEL (a registry name), or {metric}@{NO_MODEL} if it loads none"
    try:
        resources = model_free_resources(metric)
    except PluginError as error:
        if ":" not in metric:
            raise ConfigError(
                f"--metric {metric}: not a metric of the config ({', '.join(known)}) nor PLUGIN@MODEL ({error})"
            ) from None
        raise ConfigError(f"--metric {metric}: {hint} ({error})") from None
    if resources is None:
        raise ConfigError(f"--metric {metric}: {hint}; its class does not say `registry_model = False`")
    return {"resources": resources} if resources else {}


def metric_entries(config: dict[str, Any], metrics: Sequence[str]) -> dict[str, Any]:
    """Each `--metric`: a metric of the base config by name, or a plug-in (`module:Class` or an installed
    entry point's name) as `PLUGIN@MODEL`, MODEL the registry name of the model it loads; `PLUGIN@none`, or
    PLUGIN alone when its class says `registry_model = False`, for one that loads none (`model_free_entry`)."""
    known, chosen = config["evaluation"]["metrics"], {}
    for metric in metrics:
        if metric in known:
            chosen[metric] = known[metric]
            continue
        plugin, at, model = metric.partition("@")
        if not at:
            own = model_free_entry(metric, list(known))
        elif model == NO_MODEL:
            own = {}
        else:
            own = {"model": model_entry(config, model, plugin)}
        family = next(iter(config["evaluation"]["families"]))
        name = re.sub(r"[^a-z0-9._-]+", "-", plugin.rsplit(":", 1)[-1].lower())
        chosen[name] = {"plugin": plugin, **own, "label": plugin, "family": family}
    return chosen


def protobias_config(
    base: dict[str, Any],
    dataset: str,
    metrics: Sequence[str],
    columns: Mapping[str, str],
    results_dir: str,
    limit: int | None = None,
) -> dict[str, Any]:
    """The base config scoring `metrics` on the ProtoBias pairs at `dataset` (the sample of `limit` that everyone
    draws, given one): its domains as the scored pairs' (each with as many seeds as their triplets), HumbleBench off."""
    from blindspot.protobias import released

    config = copy.deepcopy(base)
    every = released.read_test_pairs(dataset, columns, Path(results_dir) / "evaluate_probe")
    pairs = released.test_pair_sample(every, limit)  # as import_dataset samples them, so the shards match
    taxonomy = next(iter(base["domains"].values()))["taxonomy"]  # unread with `dataset:`; the schema asks for one
    config["domains"] = {
        domain: {"taxonomy": base["domains"].get(domain, {}).get("taxonomy", taxonomy), "n_seeds": n}
        for domain, n in released.domain_seed_counts(pairs).items()
    }
    config["evaluation"]["metrics"] = metric_entries(config, metrics)
    config["dataset"] = {"path": dataset, "columns": dict(columns), "limit": limit}
    config["humblebench"] |= {"release": None, "from_benchmark": None, "scene_graphs": None}
    config["annotation"]["pairwise_labels"] = None
    config["results_dir"] = results_dir
    return config


# The tables (`humblebench.tables` keys) that need a setting beside Table 4's: without it, left out.
TABLES_NEEDING = (("stress", "Table 7's stress column"), ("cautious", "the appendix's Original -> Cautious table"))


def humblebench_config(
    base: dict[str, Any],
    release: str,
    vlms: Sequence[str],
    settings: Sequence[str],
    results_dir: str,
    limit: int | None = None,
) -> dict[str, Any]:
    """The base config answering HumbleBench's `release` (the sample of `limit` questions that everyone draws,
    given one) with `vlms` under `settings` (default all), and no ProtoBias. A local release is read here first,
    whole, as the workflow's job reads it before it samples (`load_release`: every record checked, every image
    read whole; images that come as bytes written to `evaluate_probe`), so that one the workflow cannot read
    stops before it starts."""
    from blindspot.hub.repos import is_hub_dataset
    from blindspot.humblebench.release import load_release

    if not is_hub_dataset(release) and not load_release(release, Path(results_dir) / "evaluate_probe"):
        raise ConfigError(f"release {release}: no questions")
    config = copy.deepcopy(base)
    humble = config["humblebench"]
    unknown = [name for name in settings if name not in humble["settings"]]
    if unknown:
        raise ConfigError(f"--setting {unknown[0]}: not a setting of the config ({', '.join(humble['settings'])})")
    if settings:
        humble["settings"] = {name: humble["settings"][name] for name in settings}
        if humble["tables"]["original"] not in settings:
            raise ConfigError(f"--setting: Table 4 needs the setting {humble['tables']['original']}")
        for use, what in TABLES_NEEDING:
            needed = humble["tables"].get(use)
            if needed is not None and needed not in settings:
                sys.stderr.write(f"blindspot evaluate: {what} left out: it needs the setting {needed}\n")
                humble["tables"].pop(use)
    humble |= {
        "release": release,
        "from_benchmark": None,
        "scene_graphs": None,
        "limit": limit,
        "vlms": [model_entry(config, vlm) for vlm in vlms],
    }
    config["dataset"] = {"path": None}
    config["results_dir"] = results_dir
    return config


def from_here(path: str | None, what: str) -> str | None:
    """A file or folder named on the command line, as the current folder names it, absolute; a hub id as
    it is. Anything else is a ConfigError naming `what` it is and where it was looked for."""
    from blindspot.hub.repos import is_hub_dataset

    if path is None or Path(path).exists():
        return path and str(Path(path).resolve())
    if is_hub_dataset(path):
        return path
    raise ConfigError(f"{what} {path}: no such file or folder in {Path.cwd()}")


def model_here(config: dict[str, Any], name: str) -> str:
    """A `--vlm`, or the MODEL of `--metric PLUGIN@MODEL`: a folder named from the current folder, absolute; a
    registry name (which wins over a folder of that name) or a hub id as it is."""
    return str(Path(name).resolve()) if name not in config["models"] and Path(name).is_dir() else name


def metric_here(config: dict[str, Any], metric: str) -> str:
    """A `--metric` with its model's folder, if it names one, absolute (`model_here`)."""
    plugin, at, model = metric.partition("@")
    return f"{plugin}@{model_here(config, model)}" if at else metric


def profile_here(profile: str | None) -> str | None:
    """A profile folder named from the current folder, else the checkout's (profiles/slurm from anywhere),
    else a name Snakemake looks up in its own places (~/.config/snakemake)."""
    if profile and Path(profile).is_dir():
        return str(Path(profile).resolve())
    if profile and (CHECKOUT / profile).is_dir():
        return str(CHECKOUT / profile)
    return profile
