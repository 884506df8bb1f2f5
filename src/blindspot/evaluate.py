"""`blindspot evaluate`: score a metric on a released ProtoBias, or a VLM on HumbleBench's release, in one
command. It writes a config (the base config with `dataset:`, so nothing is built), runs the workflow's
own rules with it, prints the table beside rows passed with `--compare`, and records what makes a row
comparable: the dataset's fingerprint, each model's identity and the settings."""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from blindspot import targets
from blindspot.checks import validate_config
from blindspot.config import ConfigError
from blindspot.dag import checkout_config
from blindspot.io import read_csv, write_json, write_text
from blindspot.models.roles import misplaced, role_fits
from blindspot.paths import CHECKOUT, SNAKEFILE

# The base config without --configfile, in the checkout.
DEFAULT_CONFIG = "config/tiny.yaml"
# What `evaluate` writes beside the workflow's tables: its rows with their provenance.
ROWS = {"protobias": "evaluate_protobias", "humblebench": "evaluate_humblebench"}


def registry_entry(config: dict[str, Any], name: str) -> str:
    """`name`, which must be in the registry: what a job asks for (GPUs, memory from `weights_gb`, dtype)
    is the entry's, and cannot be guessed from a hub id."""
    if name not in config["models"]:
        raise ConfigError(
            f"model {name}: not in the config's registry; add an entry for it (id, backend, gpus, dtype, "
            "weights_gb) to a copy of the config and pass that with --configfile"
        )
    return name


def metric_entries(config: dict[str, Any], metrics: Sequence[str]) -> dict[str, Any]:
    """Each `--metric`: a metric of the base config by name, or a plug-in `PLUGIN@MODEL`, where PLUGIN is
    `module:Class` or an installed entry point's name and MODEL the registry name of the model it loads
    (every metric entry names one)."""
    known, chosen = config["evaluation"]["metrics"], {}
    for metric in metrics:
        if metric in known:
            chosen[metric] = known[metric]
            continue
        plugin, _, model = metric.partition("@")
        if not model:
            hint = (
                f"name the plug-in's model as {metric}@MODEL (a registry name)"
                if ":" in metric
                else (f"not a metric of the config ({', '.join(known)}) nor PLUGIN@MODEL")
            )
            raise ConfigError(f"--metric {metric}: {hint}")
        family = next(iter(config["evaluation"]["families"]))
        name = re.sub(r"[^a-z0-9._-]+", "-", plugin.rsplit(":", 1)[-1].lower())
        chosen[name] = {"plugin": plugin, "model": registry_entry(config, model), "label": plugin, "family": family}
    return chosen


def protobias_config(
    base: dict[str, Any], dataset: str, metrics: Sequence[str], columns: Mapping[str, str], results_dir: str
) -> dict[str, Any]:  # fmt: skip
    """The base config scoring `metrics` on the ProtoBias pairs at `dataset`: its domains as the dataset's
    (each with as many seeds as its test triplets), HumbleBench off."""
    from blindspot.protobias import released

    config = copy.deepcopy(base)
    pairs = released.read_test_pairs(dataset, columns, Path(results_dir) / "evaluate_probe")
    taxonomy = next(iter(base["domains"].values()))["taxonomy"]  # unread with `dataset:`; the schema asks for one
    config["domains"] = {
        domain: {"taxonomy": base["domains"].get(domain, {}).get("taxonomy", taxonomy), "n_seeds": n}
        for domain, n in released.domain_seed_counts(pairs).items()
    }
    config["evaluation"]["metrics"] = metric_entries(config, metrics)
    config["dataset"] = {"path": dataset, "columns": dict(columns)}
    config["humblebench"] |= {"release": None, "from_benchmark": None, "scene_graphs": None}
    config["annotation"]["pairwise_labels"] = None
    config["results_dir"] = results_dir
    return config


def humblebench_config(
    base: dict[str, Any], release: str, vlms: Sequence[str], settings: Sequence[str], results_dir: str
) -> dict[str, Any]:  # fmt: skip
    """The base config answering HumbleBench's `release` with `vlms` under `settings` (default all), and no
    ProtoBias. A local release is read here first, so that one the workflow cannot read stops before it
    starts: a JSON(L) file whole (every line checked), a table or folder to its first record only (their
    records carry images)."""
    from blindspot.humblebench.release import checked_release_question
    from blindspot.models.hub import is_hub_dataset
    from blindspot.models.releases import release_records

    if not is_hub_dataset(release):
        records = release_records(release)
        whole = Path(release).is_file() and Path(release).suffix in (".jsonl", ".json")
        checked = itertools.islice(records, None if whole else 1)
        if not [checked_release_question(record, release) for record in checked]:
            raise ConfigError(f"release {release}: no questions")
    config = copy.deepcopy(base)
    humble = config["humblebench"]
    unknown = [name for name in settings if name not in humble["settings"]]
    if unknown:
        raise ConfigError(f"--setting {unknown[0]}: not a setting of the config ({', '.join(humble['settings'])})")
    if settings:
        humble["settings"] = {name: humble["settings"][name] for name in settings}
        if any(humble["tables"][table] not in settings for table in ("original", "stress")):
            raise ConfigError(f"--setting: Tables 4-6 need the settings {humble['tables']['original']} and "
                              f"{humble['tables']['stress']}")  # fmt: skip
        if humble["tables"].get("cautious") not in settings:  # the appendix table needs it; without, no table
            humble["tables"].pop("cautious", None)
    humble |= {"release": release, "from_benchmark": None, "scene_graphs": None,
               "vlms": [registry_entry(config, vlm) for vlm in vlms]}  # fmt: skip
    config["dataset"] = {"path": None}
    config["results_dir"] = results_dir
    return config


def _weights_hash(config: dict[str, Any], name: str) -> str:
    """A built model's files' hash, or a hub model's revision (its weights as the hub names them)."""
    from blindspot.protobias.released import fingerprint

    folder = Path(targets.path(config, "model", model=name))
    return fingerprint(str(folder)) if folder.is_dir() else config["models"][name].get("revision") or "unpinned"


def model_identity(config: dict[str, Any], name: str) -> dict[str, str]:
    entry = config["models"][name]
    return {"model": name, "model_id": entry.get("id", f"built:{name}"), "weights": _weights_hash(config, name)}


def provenance(config: dict[str, Any], benchmark: str) -> dict[str, Any]:
    """What makes a row comparable: the dataset's fingerprint, the package and what was scored, the settings."""
    from blindspot.protobias.released import fingerprint

    source = config["dataset"]["path"] if benchmark == "protobias" else config["humblebench"]["release"]
    about: dict[str, Any] = {"dataset": source, "dataset_fingerprint": fingerprint(source),
                             "blindspot": version("blindspot"), "seed": config["seed"]}  # fmt: skip
    if benchmark == "protobias":
        evaluation = config["evaluation"]
        about["metrics"] = {
            name: {"plugin": entry["plugin"], "args": entry.get("args", {})}
            | (model_identity(config, entry["model"]) if "model" in entry else {})
            for name, entry in evaluation["metrics"].items()
        }
        about["settings"] = {
            "bootstrap_samples": evaluation["bootstrap_samples"],
            "columns": config["dataset"]["columns"],
        }
    else:
        humble = config["humblebench"]
        about["vlms"] = {name: model_identity(config, name) for name in humble["vlms"]}
        about["settings"] = {"settings": humble["settings"], "reading": humble["reading"]}
    return about


def result_table(config: dict[str, Any], benchmark: str) -> pd.DataFrame:
    """The rows the run wrote: Table 3's, or HumbleBench's metrics per VLM and setting."""
    kind = ("table3", {"ext": "csv"}) if benchmark == "protobias" else ("humble_metrics", {})
    return pd.read_csv(targets.path(config, kind[0], **kind[1]))


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()


def record_rows(config: dict[str, Any], benchmark: str, rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with their provenance (the dataset's fingerprint, the models' identity, the settings)
    as columns, written as CSV with the JSON of the whole provenance beside it."""
    about = provenance(config, benchmark)
    stamped = rows.assign(dataset_fingerprint=about["dataset_fingerprint"], blindspot=about["blindspot"],
                          identity=_flow({k: about[k] for k in ("metrics", "vlms") if k in about}),
                          settings=_flow(about["settings"]))  # fmt: skip
    stem = Path(targets.path(config, "table3", ext="csv")).parent / ROWS[benchmark]
    write_text(f"{stem}.csv", stamped.to_csv(index=False))
    write_json(f"{stem}.json", about)
    return stamped


def with_compared(rows: pd.DataFrame, compared: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The new rows after the rows of each `--compare` CSV (path: its rows, with the table's columns), each
    marked by its source."""
    frames = []
    for path, found in compared.items():
        missing = [column for column in rows.columns[:1] if column not in found]
        if missing:
            raise ConfigError(f"--compare {path}: no column {missing[0]!r} (a CSV with the table's columns)")
        frames.append(found.reindex(columns=rows.columns).assign(row=f"compared: {Path(path).name}"))
    return pd.concat([*frames, rows.assign(row="new")], ignore_index=True)


def run_workflow(configfile: Path, profile: str | None, cores: int) -> None:
    """The workflow's own rules on `configfile`, in the checkout, its progress on this terminal. It starts
    from the current folder, where a relative PYTHONPATH (an outside plug-in's) and `profile` are named."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE),
               "--configfile", str(configfile), "--directory", str(CHECKOUT)]  # fmt: skip
    command += ["--profile", profile] if profile else ["--cores", str(cores)]
    if subprocess.run(command, check=False).returncode:
        raise ConfigError(f"the workflow failed on {configfile}; its log says why (above, and in .snakemake/log)")


def from_here(path: str | None, what: str) -> str | None:
    """A file or folder named on the command line, as the current folder names it, absolute; a hub id as
    it is. Anything else is a ConfigError naming `what` it is and where it was looked for."""
    from blindspot.models.hub import is_hub_dataset

    if path is None or Path(path).exists():
        return path and str(Path(path).resolve())
    if is_hub_dataset(path):
        return path
    raise ConfigError(f"{what} {path}: no such file or folder in {Path.cwd()}")


def profile_here(profile: str | None) -> str | None:
    """A profile folder named from the current folder, else the checkout's (profiles/slurm from anywhere),
    else a name Snakemake looks up in its own places (~/.config/snakemake)."""
    if profile and not Path(profile).is_dir() and (CHECKOUT / profile).is_dir():
        return str(CHECKOUT / profile)
    return profile


def evaluate(args: Any) -> pd.DataFrame:
    """`blindspot evaluate protobias|humblebench`: the generated config, the run, the recorded rows. Paths
    on the command line are the current folder's; the config's relative paths (its taxonomies, templates,
    `results_dir`) are the checkout's, where the workflow runs, from whatever folder the command runs."""
    from huggingface_hub import constants

    base = checkout_config(args.configfile, DEFAULT_CONFIG)
    results_dir = args.results_dir and str(Path(args.results_dir).resolve())
    if args.benchmark == "protobias":
        source = from_here(args.dataset, "--dataset")
    else:
        source = from_here(args.release, "--release")
    # read before the run, so a file that is no CSV stops the command before the workflow, not after it
    compare = [from_here(path, "--compare") for path in args.compare]
    compared = {path: read_csv(path, "--compare") for path in compare}
    profile = profile_here(args.profile)
    with contextlib.chdir(CHECKOUT):
        results_dir = results_dir or str(Path(base["results_dir"]).resolve() / f"evaluate_{args.benchmark}")
        if Path(results_dir).exists() and not Path(results_dir).is_dir():
            raise ConfigError(f"--results-dir {results_dir}: not a folder")
        if args.benchmark == "protobias":
            malformed = [pair for pair in args.column if not pair.partition("=")[0] or "=" not in pair]
            if malformed:
                raise ConfigError(f"--column {malformed[0]!r} is not FIELD=COLUMN")
            columns = dict(pair.split("=", 1) for pair in args.column)
            config = protobias_config(base, source, args.metric, columns, results_dir)
        else:
            config = humblebench_config(base, source, args.vlm, args.setting, results_dir)
        validate_config(config)
        # the models the command placed (the base's others run elsewhere), checked before a compute node loads them
        placed = {"protobias": "evaluation.metrics.", "humblebench": "humblebench.vlms"}[args.benchmark]
        unfit = [fit for fit in role_fits(config, constants.HF_HUB_CACHE)
                 if fit.takes is False and any(key.startswith(placed) for key in fit.keys)]  # fmt: skip
        if unfit:
            raise ConfigError(misplaced(unfit[0]))
        written = Path(results_dir) / "evaluate_config.yaml"
        written.parent.mkdir(parents=True, exist_ok=True)
        write_text(written, yaml.safe_dump(config, sort_keys=False))
    run_workflow(written, profile, args.cores)
    with contextlib.chdir(CHECKOUT):
        rows = record_rows(config, args.benchmark, result_table(config, args.benchmark))
        return with_compared(rows, compared)


def _cores(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of cores (a whole number, at least 1)")
    return int(text)


def add_parser(commands: Any) -> None:
    """`evaluate`'s subcommands, on the `blindspot` parser."""
    parser = commands.add_parser("evaluate", help="score a metric or a VLM on a released benchmark, building nothing")
    kinds = parser.add_subparsers(dest="benchmark", required=True)
    for name, help in (("protobias", "a metric's Table 3 row on ProtoBias pairs"),
                       ("humblebench", "a VLM's HumbleBench rows on the release")):  # fmt: skip
        sub = kinds.add_parser(name, help=help, description=help)
        sub.add_argument("--configfile", help=f"the base config: models, settings, resources, its relative paths "
                         f"the checkout's (default: the checkout's {DEFAULT_CONFIG})")  # fmt: skip
        sub.add_argument("--results-dir", help="where the run writes (default {results_dir}/evaluate_<benchmark>)")
        sub.add_argument("--profile", help="a Snakemake profile, e.g. profiles/slurm (default: local)")
        sub.add_argument("--cores", type=_cores, default=1, help="local cores without --profile")
        sub.add_argument("--compare", action="append", default=[], help="a CSV of earlier rows to print beside")
        if name == "protobias":
            sub.add_argument("--dataset", required=True, help="the export's folder or hub id, or a table of pairs")
            sub.add_argument(
                "--metric", action="append", required=True, help="a config's metric, or module:Class@MODEL"
            )
            sub.add_argument("--column", action="append", default=[], metavar="FIELD=COLUMN",
                             help="a field's column: neutral_prompt, image_corr, image_adv, ...")  # fmt: skip
        else:
            sub.add_argument("--release", required=True, help="HumbleBench's release: a file, folder or hub id")
            sub.add_argument(
                "--vlm",
                action="append",
                required=True,
                help="a model's name in the config's registry (models:), not a hub id or path",
            )
            sub.add_argument("--setting", action="append", default=[], help="a setting of the config (default all)")


def main(args: Any) -> None:
    rows = evaluate(args)
    sys.stdout.write(rows.to_markdown(index=False) + "\n")
