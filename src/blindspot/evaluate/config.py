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

from blindspot.config import ConfigError
from blindspot.paths import CHECKOUT

# The base config without --configfile, in the checkout.
DEFAULT_CONFIG = "config/tiny.yaml"


def registry_entry(config: dict[str, Any], name: str) -> str:
    """`name`, which must be in the registry: what a job asks for (GPUs, memory from `weights_gb`, dtype)
    is the entry's, and cannot be guessed from a hub id."""
    if name not in config["models"]:
        raise ConfigError(
            f"model {name}: not in the config's registry; add an entry for it (id, backend, gpus, dtype, "
            "weights_gb) to a copy of the config and pass that with --configfile"
        )
    return name


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
            own = {"model": registry_entry(config, model)}
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
        "vlms": [registry_entry(config, vlm) for vlm in vlms],
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


def profile_here(profile: str | None) -> str | None:
    """A profile folder named from the current folder, else the checkout's (profiles/slurm from anywhere),
    else a name Snakemake looks up in its own places (~/.config/snakemake)."""
    if profile and Path(profile).is_dir():
        return str(Path(profile).resolve())
    if profile and (CHECKOUT / profile).is_dir():
        return str(CHECKOUT / profile)
    return profile
