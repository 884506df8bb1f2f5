"""A ProtoBias benchmark that exists already (the config's `dataset:`): this project's export
(`export_dataset`'s folder, or its copy on the hub) or any table of pairs with a prompt, a correct
image and an adversarial image. Its test pairs are read into the tables the scoring rules read, so
nothing is built."""

from __future__ import annotations

import hashlib
import reprlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from blindspot import schemas
from blindspot.config import ConfigError
from blindspot.hub.cache import dataset_snapshot
from blindspot.hub.datasets import RELEASE_SUFFIXES, one_of, release_records
from blindspot.hub.repos import is_hub_dataset
from blindspot.images import IMAGE_BYTES, ImageReadError, check_images, store_image_bytes
from blindspot.io import read_csv, stable_id
from blindspot.plugins import trained_by
from blindspot.protobias.export import FIELDS, IMAGES
from blindspot.sampling import stratified_sample

# The fields a pair needs, by this project's export's column names; `dataset.columns` maps them to
# another table's. Domain, split and ids are read when present; the export's other fields too.
REQUIRED = ("neutral_prompt", *IMAGES)
OPTIONAL = ("domain", "split", *(name for name in FIELDS if name != "neutral_prompt"))
# The files a dataset may be: what `release_records` reads, and CSV.
DATASET_SUFFIXES = (*RELEASE_SUFFIXES, ".csv")
# The domain of a table without a domain column.
DEFAULT_DOMAIN = "all"
# What a sample of the test pairs (`dataset.limit`) is stratified by; only test pairs are read, so the split
# is one, but a sample of a future split's pairs would be drawn within it.
SAMPLE_STRATA = ("domain", "split")


class DatasetError(ValueError):
    """A dataset that cannot be read as pairs; the message names the dataset and what is wrong."""


def dataset_records(source: str) -> Iterator[dict[str, Any]]:
    """The dataset's rows. This project's export (a folder of `data/{domain}/{split}-*.parquet`, or the hub
    id it was uploaded to) gives each row its domain and split from where it lies; any other
    table (a .jsonl, .json, .parquet or .csv file, or a folder `release_records` reads) gives its rows."""
    if is_hub_dataset(source):  # its snapshot in the hub cache: the same layout
        yield from dataset_records(str(dataset_snapshot(source, "dataset")))
        return
    path = Path(source)
    if not path.exists():
        raise DatasetError(f"dataset {source}: no such file or folder")
    if path.is_file() and path.suffix not in DATASET_SUFFIXES:
        raise DatasetError(f"dataset {source}: a file must be {one_of(DATASET_SUFFIXES)}")
    shards = sorted(path.glob("data/*/*.parquet")) if path.is_dir() else []
    if shards:
        for shard in shards:
            where = {"domain": shard.parent.name, "split": shard.name.split("-", 1)[0]}
            yield from (where | record for record in release_records(str(shard), "dataset"))
    elif path.suffix == ".csv":
        yield from read_csv(path, "dataset", keep_default_na=False, dtype=str).to_dict("records")  # text: ids stay ids
    else:
        yield from release_records(source, "dataset")


def _image_file(value: Any, base: Path, image_dir: Path, where: str) -> tuple[str, Path]:
    """(what names the image in a message, its file): a path, relative to the table's folder, is that file;
    bytes, or a `{bytes, path}` dict as `datasets` stores images, are written to `image_dir`, named by
    their content."""
    if isinstance(value, Mapping):
        value = value.get("bytes") or value.get("path")
    if isinstance(value, str) and value:
        return str(base / value), base / value
    if isinstance(value, bytes):
        try:
            return IMAGE_BYTES, store_image_bytes(value, image_dir, where)
        except ValueError as error:
            raise DatasetError(str(error)) from None
    if value is None or isinstance(value, str):  # a path is a text that is not empty
        raise DatasetError(f"{where}: no image (a path or an image's bytes)")
    raise DatasetError(f"{where}: {type(value).__name__} {reprlib.repr(value)}, not an image's path or bytes")


def _field_value(field: str, value: Any, where: str) -> Any:
    """A field's value as `schemas.BENCHMARK_PAIRS` holds it: text, or a whole number (which a CSV gives
    as text); None where the row has none, which only a required field may not."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if field in REQUIRED:
            raise DatasetError(f"{where}: empty, where the pair's {field} belongs")
        return None
    if pa.types.is_integer(schemas.BENCHMARK_PAIRS.field(field).type):
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise DatasetError(f"{where}: {type(value).__name__} {reprlib.repr(value)}, not a whole number")
    elif not isinstance(value, str):
        raise DatasetError(f"{where}: {type(value).__name__} {reprlib.repr(value)}, not text")
    return value


def _columns_of(record: Mapping[str, Any], source: str, columns: Mapping[str, str]) -> dict[str, str]:
    """Each field's column in the table; a required field without one stops with the column it looked for."""
    for field, column in columns.items():
        if field not in (*REQUIRED, *OPTIONAL):
            raise DatasetError(f"dataset.columns: {field!r} is not a field (fields: {', '.join(REQUIRED + OPTIONAL)})")
        if column not in record:
            raise DatasetError(
                f"dataset {source}: no column {column!r} (dataset.columns.{field}); it has {sorted(record)}"
            )
    found = {field: columns.get(field, field) for field in (*REQUIRED, *OPTIONAL)}
    for field in REQUIRED:
        if found[field] not in record:
            raise DatasetError(
                f"dataset {source}: no column {found[field]!r} for {field}; it has {sorted(record)} "
                f"(map one with dataset.columns.{field})"
            )
    return {field: column for field, column in found.items() if column in record}


def read_test_pairs(source: str, columns: Mapping[str, str], image_dir: str | Path) -> pd.DataFrame:
    """The dataset's test pairs (every pair when it has no split) as benchmark pairs
    (`schemas.BENCHMARK_PAIRS`), their images written to `image_dir`, ordered by domain and pair id as
    the workflow orders its own. A pair without ids gets them from its images' contents.

    Every value is checked first, and every image read whole (`images.check_images`): a row that is
    not a pair stops with one line naming the dataset, the pair (its id, else its row, counted from 1)
    and the column, and for an image its file and what is wrong with it."""
    image_dir = Path(image_dir)
    image_dir.mkdir(parents=True, exist_ok=True)
    base = Path(source) if Path(source).is_dir() else Path(source).parent
    rows, found, images, copies = [], None, [], []
    for number, record in enumerate(dataset_records(source), start=1):
        found = found or _columns_of(record, source, columns)
        pair_id = record.get(found.get("pair_id", ""))
        where = f"dataset {source}, " + (f"pair {pair_id}" if isinstance(pair_id, str) and pair_id else f"row {number}")
        row = {field: record.get(column) for field, column in found.items() if field not in IMAGES}
        row = {field: _field_value(field, value, f"{where} ({found[field]})") for field, value in row.items()}
        if (row.get("split") or "test") != "test":
            continue
        for role, field in (("corr", "image_corr"), ("adv", "image_adv")):
            named = f"{where} ({found[field]})"
            name, image = _image_file(record.get(found[field]), base, image_dir, named)
            images.append((f"{named}: {name}", image))
            row[f"{role}_path"] = image
            if name != IMAGE_BYTES:  # a file of the table's: copied once read whole
                copies.append((row, role))
        rows.append(row)
    try:
        check_images(images)
    except ImageReadError as error:
        raise DatasetError(str(error)) from None
    for row, role in copies:  # read whole above: now copied beside the images that came as bytes
        row[f"{role}_path"] = store_image_bytes(row[f"{role}_path"].read_bytes(), image_dir, str(row[f"{role}_path"]))
    for row in rows:
        for role in ("corr", "adv"):
            row[f"{role}_path"], row[f"{role}_image_id"] = str(row[f"{role}_path"]), row[f"{role}_path"].stem
        row["pair_id"] = row.get("pair_id") or stable_id(row["corr_image_id"], row["adv_image_id"])
        row["triplet_id"] = row.get("triplet_id") or row["pair_id"]
        row["domain"] = row.get("domain") or DEFAULT_DOMAIN
    if not rows:
        raise DatasetError(f"dataset {source}: no test pairs")
    frame = pd.DataFrame(rows).assign(split="test", seed_id=lambda f: f["triplet_id"])
    if not frame["pair_id"].is_unique:
        raise DatasetError(
            f"dataset {source}: pair ids repeat, e.g. {frame['pair_id'][frame['pair_id'].duplicated()].iloc[0]!r}"
        )
    for name in schemas.BENCHMARK_PAIRS.names:
        if name not in frame:
            frame[name] = np.nan if pa.types.is_floating(schemas.BENCHMARK_PAIRS.field(name).type) else None
    frame["vlm_scores"] = frame["vlm_scores"].fillna("{}")
    return frame.sort_values(["domain", "pair_id"], ignore_index=True)


def test_pair_sample(pairs: pd.DataFrame, limit: int | None) -> pd.DataFrame:
    """The `limit` test pairs everyone scores (`dataset.limit`; all of them when None), stratified by domain
    and split, drawn by the hash of the pair id (`sampling.stratified_sample`)."""
    return stratified_sample(pairs, SAMPLE_STRATA, "pair_id", limit)


def domain_seed_counts(pairs: pd.DataFrame) -> dict[str, int]:
    """Seeds (here: triplets) per domain, which set a domain's shards (`domains.<name>.n_seeds`)."""
    return {str(domain): int(n) for domain, n in pairs.groupby("domain")["seed_id"].nunique().items()}


def scoring_tables(pairs: pd.DataFrame, domain: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(pairs, triplets, seeds) of one domain, as `score_metric` reads them: every pair kept, and the
    seeds in id order (its shards are slices of them)."""
    mine = pairs[pairs["domain"] == domain]
    kept = mine.assign(kept=True)[schemas.PAIRS.names]
    triplets = mine.drop_duplicates("triplet_id")[schemas.TRIPLETS.names].sort_values("triplet_id", ignore_index=True)
    seeds = pd.DataFrame({name: triplets["seed_id"] if name == "seed_id" else None for name in schemas.SEEDS.names})
    seeds["domain"] = domain
    return kept, triplets, seeds.sort_values("seed_id", ignore_index=True)


def check_domains(pairs: pd.DataFrame, domains: Mapping[str, int], source: str) -> None:
    """Every domain of the dataset is in the config, with at least as many seeds as it has triplets."""
    counts = domain_seed_counts(pairs)
    unknown = sorted(set(counts) - set(domains))
    if unknown:
        raise DatasetError(f"dataset {source}: domain(s) {unknown} are not in the config's domains {sorted(domains)}")
    short = {domain: n for domain, n in counts.items() if n > domains[domain]}
    if short:
        domain, n = next(iter(short.items()))
        raise DatasetError(
            f"dataset {source}: domain {domain} has {n} triplets, more than domains.{domain}.n_seeds "
            f"({domains[domain]}): raise it, or some pairs are never scored"
        )


def fingerprint(source: str) -> str:
    """A hash of the dataset's files (names and contents), or of its hub id and revision: two rows
    scored on datasets of one fingerprint saw the same pairs."""
    path = Path(source)
    digest = hashlib.sha256()
    if not path.exists():
        from huggingface_hub import HfApi

        digest.update(f"{source}@{HfApi().dataset_info(source).sha}".encode())
        return digest.hexdigest()
    files: Sequence[Path] = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode() + b"\0")
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def check_released_config(config: Mapping[str, Any]) -> None:
    """With `dataset:` nothing is built, so nothing may ask for what only building gives: questions from
    the benchmark or scene graphs, ProtoScore (trained on the built train split), people's pairwise labels."""
    if "dataset" not in config:
        return
    humble, scored = config["humblebench"], config["dataset"].get("path")
    if not scored and not humble.get("release"):
        raise ConfigError("dataset: give dataset.path (ProtoBias pairs to score) or humblebench.release, or both")
    for key in ("from_benchmark", "scene_graphs"):
        if humble.get(key):
            raise ConfigError(
                f"dataset: HumbleBench's questions come from humblebench.release; set humblebench.{key} to null"
            )
    metrics = config["evaluation"]["metrics"]
    trained = [(name, declared) for name, entry in metrics.items() if (declared := trained_by(entry["plugin"]))]
    if scored and trained:
        name, declared = trained[0]
        raise ConfigError(
            f"dataset: metric {name} scores with {declared.step}'s output, trained on a built benchmark; leave it out"
        )
    if scored and config["annotation"].get("pairwise_labels"):
        raise ConfigError(
            "dataset: Table 3's human majority comes from evaluation.human_choices, not annotation.pairwise_labels"
        )
