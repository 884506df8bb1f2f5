"""HumbleBench's official release in every format it is published in: JSON(L) and parquet files,
`save_to_disk` folders, the imagefolder layout (`metadata.jsonl` with `file_name`) and hub snapshot
folders (parquet shards), with images as paths, bytes or `{bytes, path}`; read into question rows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from blindspot.humblebench.questions import question_row
from blindspot.humblebench.settings import LETTERS, Question
from blindspot.images import store_image_bytes
from blindspot.io import jsonl_records, utf8_text
from blindspot.models.hub import dataset_snapshot, is_hub_dataset

OPTION_LINE = re.compile(r"^\s*\(?([A-E])[.)]\s*(.+?)\s*$")
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


def split_release_question(text: str, question_id: str) -> tuple[str, tuple[str, ...]]:
    """The release writes the options into the question ("...?\\nA. red\\n...\\nE. None of the above"):
    the stem and the option texts, which must be lettered A, B, ... in order."""
    stem, options = [], []
    for line in text.splitlines():
        match = OPTION_LINE.match(line)
        if match and match.group(1) == LETTERS[len(options)]:
            options.append(match.group(2))
        elif options and line.strip():
            raise ValueError(f"release question {question_id}: text after option {LETTERS[len(options) - 1]}")
        elif line.strip():
            stem.append(line.strip())
    if len(options) < 2 or not stem:
        raise ValueError(f"release question {question_id}: no stem and lettered options in {text!r}")
    return " ".join(stem), tuple(options)


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


def _imagefolder_records(metadata: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """Rows of a Hugging Face imagefolder: each `metadata.jsonl` names its images (`file_name`) relative
    to its own folder; they are given as whole paths (the folder may be a hub snapshot in the cache)."""
    for path in metadata:
        for number, record in jsonl_records(path):
            if "file_name" not in record:
                raise ValueError(f"{path}: line {number} has no file_name (an imagefolder's metadata names its image)")
            yield record | {"image": str(path.parent / record.pop("file_name"))}


def release_records(source: str, what: str = "release") -> Iterator[dict[str, Any]]:
    """The release's records, from any of its formats: a .jsonl, .json or .parquet file; a folder (a
    `save_to_disk` dataset, an imagefolder with `metadata.jsonl`, or a hub snapshot of parquet shards);
    or a hub dataset id, read as its snapshot in the hub cache (`models.hub.dataset_snapshot`). A record's image is
    a path (relative to the file or metadata folder), an image's bytes, or a {"bytes", "path"} dict.
    `what` ("release" or "dataset") is what the source is, for messages."""
    path = Path(source)
    if path.is_file():
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
        metadata = sorted(path.rglob("metadata.jsonl"))
        if metadata:
            return _imagefolder_records(metadata)
        shards = sorted(path.rglob("*.parquet"))
        if shards:
            return (record for shard in shards for record in _table_records(shard))
        raise ValueError(f"{what} {source}: a folder without a saved dataset, metadata.jsonl or parquet shards")
    if not is_hub_dataset(source):
        raise ValueError(f"{what} {source}: no such file or folder")
    return release_records(str(dataset_snapshot(source, what)), what)


def _release_image(image: Any, base: Path, image_dir: Path, question_id: str) -> str:
    """Where a release record's image is: its path (relative to `base`), or, for an image that comes as
    bytes, a file in `image_dir` named by its content, so questions about one image share one file."""
    if isinstance(image, Mapping) and not image.get("bytes"):
        image = image.get("path")
    if isinstance(image, str) and image:
        return str(base / image)
    data = image.get("bytes") if isinstance(image, Mapping) else image
    if not isinstance(data, bytes):
        raise ValueError(f"release question {question_id}: its image is {type(image).__name__}, not a path or bytes")
    return str(store_image_bytes(data, image_dir, f"release question {question_id}"))


def release_question(record: Mapping[str, Any]) -> Question:
    """One release record (question_id, question with its lettered options, label, type) as a `Question`."""
    question_id = str(record["question_id"])
    stem, options = split_release_question(record["question"], question_id)
    return Question(question_id, stem, options, str(record["label"]).strip(), str(record["type"]))


def checked_release_question(record: Mapping[str, Any], source: str) -> Question:
    """`release_question` of a record that has every field of a release's; one without is a ValueError
    naming `source` and what it lacks."""
    missing = {"question_id", "question", "type", "label", "image"} - set(record)
    if missing:
        raise ValueError(f"{source}: a release record lacks {sorted(missing)}")
    return release_question(record)


def load_release(source: str, image_dir: str | Path) -> list[dict[str, Any]]:
    """Question rows from the official release (any format `release_records` reads), with fields
    question_id, question, type, label and image. Images that come as bytes are written to `image_dir`
    unchanged, one file per distinct image."""
    image_dir = Path(image_dir)
    image_dir.mkdir(parents=True, exist_ok=True)
    base = Path(source).parent if Path(source).is_file() else Path(source)
    rows = []
    for record in release_records(source):
        question = checked_release_question(record, source)
        image_path = _release_image(record["image"], base, image_dir, question.question_id)
        rows.append(question_row(question, "release", image_path, {"release": source}, verified=True))
    return rows
