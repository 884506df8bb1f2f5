"""`blindspot evaluate`, from the command line or Python (`blindspot.api.evaluate`): score a metric on a
released ProtoBias, or a VLM on HumbleBench's release. It writes a config (`blindspot.evaluate.config`),
runs the workflow's own rules with it, returns the table beside rows passed with `compare`, and records
what makes a row comparable: the dataset's fingerprint, each model's identity and the settings."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from blindspot import targets
from blindspot.checks import absolute_paths, validate_config
from blindspot.config import ConfigError, one_line
from blindspot.dag import checkout_config
from blindspot.evaluate.config import (
    DEFAULT_CONFIG,
    from_here,
    humblebench_config,
    metric_here,
    model_here,
    profile_here,
    protobias_config,
)
from blindspot.evaluate.failure import workflow_failure
from blindspot.evaluate.records import read_records, records_comparisons, write_records_comparisons
from blindspot.io import read_csv, read_json, write_json, write_text
from blindspot.models.roles import misplaced, role_fits
from blindspot.paths import CHECKOUT, SNAKEFILE
from blindspot.sampling import ALL, sample_label

# What `evaluate` writes beside the workflow's tables: its rows with their provenance.
ROWS = {"protobias": "evaluate_protobias", "humblebench": "evaluate_humblebench"}
# Each benchmark's items, and the counters of the step that samples them (`blindspot.sampling`).
SAMPLED = {"protobias": ("pairs", "imported_counters"), "humblebench": ("questions", "humble_question_counters")}
# The per-item records the run writes, by their kind in `targets.PATHS` (`blindspot evaluate --show` reads them).
RECORDS = {"protobias": "protobias_records", "humblebench": "humble_records"}
# The table the run writes (for messages) and the column that names its rows, which a --compare CSV has too.
TABLES = {"protobias": ("Table 3", "Method"), "humblebench": ("HumbleBench's metrics", "vlm")}


def _weights_hash(config: dict[str, Any], name: str) -> str:
    """A built or local model's files' hash, or a hub model's revision (its weights as the hub names them)."""
    from blindspot.hub.repos import model_source
    from blindspot.protobias.released import fingerprint

    entry = config["models"][name]
    folder = Path(entry["id"] if model_source(entry) == "local" else targets.path(config, "model", model=name))
    return fingerprint(str(folder)) if folder.is_dir() else entry.get("revision") or "unpinned"


def model_identity(config: dict[str, Any], name: str) -> dict[str, str]:
    entry = config["models"][name]
    return {"model": name, "model_id": entry.get("id", f"built:{name}"), "weights": _weights_hash(config, name)}


def run_sample(config: dict[str, Any], benchmark: str) -> dict[str, Any] | None:
    """The items the run scored (`sampling.sample_record`: the limit, the items sampled, the items there were),
    from the counters of the step that sampled them; None where the workflow wrote none."""
    counters = Path(targets.path(config, SAMPLED[benchmark][1]))
    return read_json(counters)["sample"] if counters.is_file() else None


def provenance(config: dict[str, Any], benchmark: str) -> dict[str, Any]:
    """What makes a row comparable: the dataset's fingerprint, the items scored of it (all, or a sample), the
    package and what was scored, the settings."""
    from blindspot.protobias.released import fingerprint

    source = config["dataset"]["path"] if benchmark == "protobias" else config["humblebench"]["release"]
    about: dict[str, Any] = {
        "dataset": source,
        "dataset_fingerprint": fingerprint(source),
        "sample": run_sample(config, benchmark),
        "blindspot": version("blindspot"),
        "seed": config["seed"],
    }
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
    """The rows the run wrote: Table 3's, or HumbleBench's metrics per VLM and setting. A file there that is
    not that table (cut short, or not its CSV) is a ValueError naming it."""
    kind = ("table3", {"ext": "csv"}) if benchmark == "protobias" else ("humble_metrics", {})
    path = targets.path(config, kind[0], **kind[1])
    name, row_column = TABLES[benchmark]
    table = read_csv(path, f"the run's {name}")
    if row_column not in table:
        raise ValueError(f"the run's {name} {path}: no column {row_column!r}, so not the table the run writes")
    if not Path(path).read_bytes().endswith(b"\n"):  # every table the run writes ends its last row
        raise ValueError(f"the run's {name} {path}: cut short (its last row has no line end)")
    return table


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()


def record_rows(config: dict[str, Any], benchmark: str, rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with their provenance (the items scored: "all" or "2 of 812 pairs"; the dataset's fingerprint,
    the models' identity, the settings) as columns, written as CSV with the JSON of the whole provenance beside it."""
    about = provenance(config, benchmark)
    scored = sample_label(about["sample"], SAMPLED[benchmark][0]) or (ALL if about["sample"] else "")
    stamped = rows.assign(
        sample=scored,
        dataset_fingerprint=about["dataset_fingerprint"],
        blindspot=about["blindspot"],
        identity=_flow({k: about[k] for k in ("metrics", "vlms") if k in about}),
        settings=_flow(about["settings"]),
    )
    stem = Path(targets.path(config, "table3", ext="csv")).parent / ROWS[benchmark]
    write_text(f"{stem}.csv", stamped.to_csv(index=False))
    write_json(f"{stem}.json", about)
    return stamped


def with_compared(rows: pd.DataFrame, compared: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The new rows after the rows of each `--compare` CSV (path: its rows, with the table's columns), each
    marked by its source."""
    frames = []
    for path, found in compared.items():
        frames.append(found.reindex(columns=rows.columns).assign(row=f"compared: {Path(path).name}"))
    return pd.concat([*frames, rows.assign(row="new")], ignore_index=True)


def _records_label(path: Path) -> str:
    """What a compared records file's systems are named after: its run's results folder (the folder above
    `tables/`, where a run writes them), else the file's name."""
    return path.parent.parent.name if path.parent.name == "tables" else path.stem


def read_compared(paths: Sequence[str], benchmark: str) -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame]]:
    """Each `--compare` file, read before the run, so that one that cannot be read stops the command before the
    workflow: a CSV of the benchmark's table (by the column that names its rows), its rows by its path, with the
    per-item records beside it where its run wrote them (`tables/`); or a records file alone (`.jsonl`). Returns
    the rows, and the records by the label their systems are named after."""
    rows, records = {}, {}
    beside = Path(targets.PATHS[RECORDS[benchmark]]).name
    for path in paths:
        if Path(path).suffix == ".jsonl":
            found = [Path(path)]
        else:
            rows[path] = read_csv(path, "--compare")
            column = TABLES[benchmark][1]
            if column not in rows[path]:
                raise ConfigError(f"--compare {path}: no column {column!r} (a CSV with the table's columns)")
            found = [file for file in [Path(path).parent / beside] if file.is_file()]
        for file in found:
            read = read_records(file)
            if read.attrs["benchmark"] != benchmark:
                raise ConfigError(f"--compare {file}: {read.attrs['benchmark']} records, not {benchmark}'s")
            label = _records_label(file)
            records[label if label not in records else str(file)] = read
    return rows, records


def compare_records(config: dict[str, Any], benchmark: str, compared: Mapping[str, pd.DataFrame]) -> Path:
    """The run's records and the `compared` runs' (`read_compared`), every two systems compared on the items both
    scored (`records.records_comparisons`), written beside the run's rows; the Markdown's path."""
    records = {"": read_records(targets.path(config, RECORDS[benchmark]))} | dict(compared)
    found = records_comparisons(records, config["evaluation"]["bootstrap_samples"], config["seed"])
    stem = Path(targets.path(config, "table3", ext="csv")).parent / f"{ROWS[benchmark]}_comparisons"
    write_records_comparisons(found, [f"{stem}.csv", f"{stem}.md"], benchmark)
    return Path(f"{stem}.md")


# In the results folder, beside Snakemake's own state: held by `evaluate` and the Snakemake it starts.
FOLDER_LOCK = ".snakemake/blindspot-evaluate.lock"


@contextlib.contextmanager
def held_folder(results_dir: Path) -> Iterator[int]:
    """The results folder, held for one `evaluate` (an open file locked with flock, which the kernel lets go
    when its last holder ends, however it ends): a second `evaluate` of the folder stops with one line, and
    a lock of Snakemake's found while we hold it is stale, left by a run that was killed."""
    path = results_dir / FOLDER_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text().strip() or "unknown"
            raise ConfigError(
                f"--results-dir {results_dir}: another `blindspot evaluate` runs there (pid {holder}); wait for "
                "it, or give this one another --results-dir"
            ) from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        yield descriptor
    finally:
        os.close(descriptor)


def run_workflow(configfile: Path, profile: str | None, cores: int) -> None:
    """The workflow's own rules on `configfile`, its progress on this terminal, in the folder of
    `configfile` (the results folder), which holds Snakemake's state: its lock, its record of the jobs done,
    its log. So evaluations with different results folders run side by side, and a run killed (kill -9, a
    closed terminal) runs again with the same command: its lock is stale (no `evaluate` holds the folder),
    the jobs that finished stay done, and the one cut off runs again (`--rerun-incomplete`). The conda envs
    are the checkout's, shared by every run."""
    results_dir = configfile.parent
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(SNAKEFILE),
        "--configfile",
        str(configfile),
        "--directory",
        str(results_dir),
        "--conda-prefix",
        str(CHECKOUT / ".snakemake" / "conda"),
        "--rerun-incomplete",
    ]
    command += ["--profile", profile] if profile else ["--cores", str(cores)]
    # an outside plug-in's folder named relative to where the command runs; the jobs run in the results folder
    paths = [str(Path(path).resolve()) for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    environment = os.environ | {"PYTHONPATH": os.pathsep.join(paths)}
    with held_folder(results_dir) as held:
        if any((results_dir / ".snakemake" / "locks").glob("*")):
            sys.stderr.write(f"blindspot evaluate: a killed run left Snakemake's lock in {results_dir}; unlocking\n")
            subprocess.run([*command, "--unlock"], check=True, env=environment, capture_output=True)
        if subprocess.run(command, check=False, env=environment, pass_fds=(held,)).returncode:
            raise ConfigError(workflow_failure(configfile, results_dir))


@contextlib.contextmanager
def _refused_as_config_error() -> Iterator[None]:
    """What a reader of `evaluate`'s inputs refuses (a ValueError: a table, release, record or value; an
    OSError: a file, an image) as the ConfigError `blindspot.api.evaluate` raises, its message the line that
    the command prints."""
    try:
        yield
    except ConfigError:
        raise
    except (ValueError, OSError) as error:
        raise ConfigError(one_line(error)) from error


@_refused_as_config_error()
def evaluate(
    benchmark: str,
    *,
    dataset: str | None = None,
    metrics: Sequence[str] = (),
    columns: Mapping[str, str] | None = None,
    release: str | None = None,
    vlms: Sequence[str] = (),
    settings: Sequence[str] = (),
    results_dir: str | None = None,
    configfile: str | None = None,
    profile: str | None = None,
    cores: int = 1,
    compare: Sequence[str] = (),
    limit: int | None = None,
) -> pd.DataFrame:
    """Score `metrics` on the ProtoBias pairs at `dataset` (benchmark "protobias"), or `vlms` on HumbleBench's
    `release` under `settings` (default all; benchmark "humblebench"), and return the table's rows with their
    provenance, after the rows of each `compare` CSV. Where a `compare` file is a records file, or a CSV with its
    run's records beside it, every two systems are compared item by item (`attrs["comparisons"]`: the Markdown's
    path). What `blindspot evaluate` runs, its options as keywords.
    With a `limit`, only a fixed sample of that many pairs or questions is scored, the same for everyone
    (`blindspot.sampling`), and every row and table says so.

    Paths given here are the current folder's; the config's relative paths (its taxonomies, templates,
    `results_dir`) are the checkout's, where the workflow runs, from whatever folder this runs."""
    from huggingface_hub import constants

    if benchmark not in ROWS:
        raise ConfigError(f"benchmark {benchmark!r}: not one of {', '.join(ROWS)}")
    # the command line's types check these; from Python they come as they are
    for name, value, what in (("limit", limit, "items"), ("cores", cores, "cores")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name} {value!r}: not a whole number of {what}, at least 1")
    base = checkout_config(configfile, DEFAULT_CONFIG)
    results_dir = results_dir and str(Path(results_dir).resolve())
    source = from_here(dataset, "--dataset") if benchmark == "protobias" else from_here(release, "--release")
    # read before the run, so a file that is no CSV stops the command before the workflow, not after it
    compared, compared_records = read_compared([from_here(path, "--compare") for path in compare], benchmark)
    profile = profile_here(profile)
    vlms = [model_here(base, vlm) for vlm in vlms]
    metrics = [metric_here(base, metric) for metric in metrics]
    with contextlib.chdir(CHECKOUT):
        results_dir = results_dir or str(Path(base["results_dir"]).resolve() / f"evaluate_{benchmark}")
        if Path(results_dir).exists() and not Path(results_dir).is_dir():
            raise ConfigError(f"--results-dir {results_dir}: not a folder")
        if benchmark == "protobias":
            config = protobias_config(base, source, metrics, columns or {}, results_dir, limit)
        else:
            config = humblebench_config(base, source, vlms, settings, results_dir, limit)
        validate_config(config)
        # the models the command placed (the base's others run elsewhere), checked before a compute node loads them
        placed = {"protobias": "evaluation.metrics.", "humblebench": "humblebench.vlms"}[benchmark]
        unfit = [
            fit
            for fit in role_fits(config, constants.HF_HUB_CACHE)
            if fit.takes is False and any(key.startswith(placed) for key in fit.keys)
        ]
        if unfit:
            raise ConfigError(misplaced(unfit[0]))
        written = Path(results_dir) / "evaluate_config.yaml"
        written.parent.mkdir(parents=True, exist_ok=True)
        write_text(written, yaml.safe_dump(absolute_paths(config, CHECKOUT), sort_keys=False))
    run_workflow(written, profile, cores)
    with contextlib.chdir(CHECKOUT):
        rows = record_rows(config, benchmark, result_table(config, benchmark))
        found = with_compared(rows, compared)
        found.attrs["records"] = str(Path(targets.path(config, RECORDS[benchmark])).resolve())
        if compared_records:
            found.attrs["comparisons"] = str(compare_records(config, benchmark, compared_records).resolve())
        return found
