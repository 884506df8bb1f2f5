"""A released benchmark's records in every format it is published in: JSON(L) and parquet files,
`save_to_disk` folders, the imagefolder layout (`metadata.jsonl` with `file_name`) and hub snapshot
folders (parquet shards), or a hub dataset id read from the hub cache; images left as paths, bytes or
`{bytes, path}`. HumbleBench's release and a released ProtoBias dataset are both read here."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from blindspot.hub.cache import dataset_snapshot
from blindspot.hub.repos import is_hub_dataset
from blindspot.io import jsonl_records, utf8_text

RELEASE_SUFFIXES = (".jsonl", ".json", ".parquet")
# What the records of each kind of source are, for messages.
RECORDS = {"release": "questions", "dataset": "pairs"}


def one_of(suffixes: Sequence[str]) -> str:
    """The suffixes as a message lists them: .jsonl, .json or .parquet."""
    return f"{', '.join(suffixes[:-1])} or {suffixes[-1]}" if len(suffixes) > 1 else suffixes[0]


def json_records(path: Path, what: str = "release") -> list[dict[str, Any]]:
    """A .json file's list of objects; anything else is a ValueError naming the file."""
    try:
        records = json.loads(utf8_text(path))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error.msg}: line {error.lineno} column {error.colno})") from None
    if not isinstance(records, list) or not all(isinstance(record, dict) for record in records):
        raise ValueError(f"{path}: not a list of {RECORDS[what]} (JSON objects)")
    return records


def _table_records(path: Path) -> Iterator[dict[str, Any]]:
    """A parquet file's rows a batch at a time: the release's shards carry their images' bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"{path}: not a parquet file ({' '.join(str(error).split())})") from None
    for batch in table.iter_batches(batch_size=256):
        yield from batch.to_pylist()


def _dataset_records(loaded: Any) -> Iterator[dict[str, Any]]:
    """A `datasets` Dataset's rows (the first split of a DatasetDict), images left undecoded: {"bytes",
    "path"} as the library stores them."""
    import datasets

    if isinstance(loaded, datasets.DatasetDict):
        loaded = loaded[next(iter(loaded))]
    if isinstance(loaded.features.get("image"), datasets.Image):
        loaded = loaded.cast_column("image", datasets.Image(decode=False))
    return iter(loaded)


IMAGEFOLDER_METADATA = "metadata.jsonl"


def _imagefolder_records(metadata: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """Rows of a Hugging Face imagefolder: each `metadata.jsonl` names its images (`file_name`) relative
    to its own folder; they are given as whole paths (the folder may be a hub snapshot in the cache)."""
    for path in metadata:
        for number, record in jsonl_records(path):
            if "file_name" not in record:
                raise ValueError(f"{path}: line {number} has no file_name (an imagefolder's metadata names its image)")
            # absolute, not resolved: a hub snapshot's metadata is a link into its blobs, its images beside the link
            yield record | {"image": str(path.absolute().parent / record.pop("file_name"))}


def release_records(source: str, what: str = "release") -> Iterator[dict[str, Any]]:
    """The release's records, from any of its formats: a .jsonl, .json or .parquet file; a folder (a
    `save_to_disk` dataset, an imagefolder with `metadata.jsonl`, or a hub snapshot of parquet shards);
    an imagefolder's `metadata.jsonl` itself, read as its folder is;
    or a hub dataset id, read as its snapshot in the hub cache (`hub.cache.dataset_snapshot`). A record's
    image is a path (relative to the file or metadata folder), an image's bytes, or a {"bytes", "path"} dict.
    `what` ("release" or "dataset") is what the source is, for messages."""
    path = Path(source)
    if path.is_file():
        if path.name == IMAGEFOLDER_METADATA:  # named directly, as the official README shows it
            return _imagefolder_records([path])
        if path.suffix == ".jsonl":
            return (record for _, record in jsonl_records(path))
        if path.suffix == ".json":
            return iter(json_records(path, what))
        if path.suffix == ".parquet":
            return _table_records(path)
        raise ValueError(f"{what} {source}: a file must be {one_of(RELEASE_SUFFIXES)}")
    import datasets

    if path.is_dir():
        if (path / "state.json").exists() or (path / "dataset_dict.json").exists():
            return _dataset_records(datasets.load_from_disk(source))
        metadata = sorted(path.rglob(IMAGEFOLDER_METADATA))
        if metadata:
            return _imagefolder_records(metadata)
        shards = sorted(path.rglob("*.parquet"))
        if shards:
            return (record for shard in shards for record in _table_records(shard))
        raise ValueError(f"{what} {source}: a folder without a saved dataset, metadata.jsonl or parquet shards")
    if not is_hub_dataset(source):
        raise ValueError(f"{what} {source}: no such file or folder")
    return release_records(str(dataset_snapshot(source, what)), what)
