"""Images in and out of a model stage a batch at a time, so a job's memory follows its batch, not its shard.

`image_batches` decodes the next batch in a small thread pool while the model works on the current
one; `BackgroundWrites` encodes and hashes the last batch's PNGs while the model makes the next. Pillow
leaves the GIL while it decodes and while it compresses a PNG, and so do the file system's calls, so
both run beside the model. What a background write still costs the model's thread is the GIL handed
back to the writer after each of those calls: nothing to a real model, whose thread mostly waits on
large tensor operations, and nearly what the write costs in line to a tiny one, whose thread runs
Python between small operations (bench/peers/render.py measures both).
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from tqdm import tqdm

Item = TypeVar("Item")


def _job_cpus() -> int:
    """The CPUs this job was given: Snakemake's OMP_NUM_THREADS (its `threads`), else the CPUs it may run on."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    return int(given) if given.isdigit() and int(given) > 0 else len(os.sched_getaffinity(0))


# Threads that decode (or encode) beside the model: the job's CPUs (a GPU job gets `threads_per_gpu`), at least
# two, so that decoding keeps up with a model that takes a batch in less time than one core decodes it.
WORKERS = max(2, _job_cpus())
PREFETCH = 1  # batches decoded ahead of the one the model works on
# Threads that decode images to check them (`check_images`): Pillow leaves the GIL while it decodes.
CHECK_WORKERS = min(8, os.cpu_count() or 1)
# What a file or bytes that Pillow cannot identify is, as `image_problem` and `store_image_bytes` say it.
NOT_AN_IMAGE = "not an image (Pillow cannot identify it)"
# How a message names an image that a record holds as bytes (a file is named by its path).
IMAGE_BYTES = "its image bytes"


class ImageReadError(OSError):
    """An image file that is missing or does not decode."""


def hash_sidecar(path: str | Path) -> Path:
    """Where the render stage records an image's sha256: `x.sha256` beside `x.png`."""
    return Path(path).with_suffix(".sha256")


def store_image_bytes(data: bytes, image_dir: Path, where: str) -> Path:
    """Encoded image bytes as a file in `image_dir` named by their content (so every record of one image
    shares one file), written once and atomically; bytes that are no image are a `ValueError` naming `where`."""
    import hashlib
    import io

    from PIL import Image, UnidentifiedImageError

    from blindspot.io import write_bytes

    try:
        with Image.open(io.BytesIO(data)) as picture:
            suffix = (picture.format or "png").lower().replace("jpeg", "jpg")
    except UnidentifiedImageError:
        raise ValueError(f"{where}: {IMAGE_BYTES}: {NOT_AN_IMAGE}") from None
    target = Path(image_dir) / f"{hashlib.sha256(data).hexdigest()[:20]}.{suffix}"
    if not target.exists():
        write_bytes(target, data)
    return target


def read_rgb(path: str | Path) -> Any:
    """The image at `path` as an RGB PIL image, its file closed; an error names the file."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except OSError as error:  # missing, not an image, truncated
        raise ImageReadError(f"cannot read image {path}: {error}") from error


def image_problem(path: str | Path) -> str | None:
    """What keeps the image file at `path` from being read whole, as a message says it after the file's
    name ("truncated (Pillow: ...)"), or None. Opening reads a file's header alone, so each is read to
    its end: a PNG chunk by chunk against each chunk's CRC (`verify`: a cut or a damaged byte anywhere,
    at a fifteenth of a decode's cost); any other format decoded (`load`, with Pillow's
    `LOAD_TRUNCATED_IMAGES` off, its default), a JPEG at an eighth of its size (`draft` still reads
    every block)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as picture:
            if picture.format == "PNG":
                picture.verify()
            else:
                picture.draft("RGB", (picture.width // 8, picture.height // 8))
                picture.load()
    except FileNotFoundError:
        return "no such file"
    except IsADirectoryError:
        return "a folder, not an image file"
    except PermissionError as error:
        return f"cannot be read ({error.strerror})"
    except UnidentifiedImageError:
        return NOT_AN_IMAGE
    except Exception as error:  # malformed data: Pillow raises OSError, SyntaxError, ValueError, struct.error...
        said = " ".join(str(error).split())
        return f"truncated (Pillow: {said})" if "truncated" in said.lower() else f"damaged (Pillow: {said})"
    return None


def check_images(images: Iterable[tuple[str, str | Path]]) -> int:
    """Read every image, given as (what names it in a message, its file), whole (`image_problem`), in
    `CHECK_WORKERS` threads; the first in order that is not whole is an `ImageReadError` "<name>:
    <problem>". A file given twice is read once. Returns how many files were read."""
    names: dict[Path, str] = {}
    for name, path in images:
        names.setdefault(Path(path), name)
    pool = ThreadPoolExecutor(CHECK_WORKERS, thread_name_prefix="check-images")
    try:
        for name, problem in zip(names.values(), pool.map(image_problem, names), strict=True):
            if problem:
                raise ImageReadError(f"{name}: {problem}")
    finally:  # a bad image: read nothing more
        pool.shutdown(wait=True, cancel_futures=True)
    return len(names)


def image_batches(
    items: Sequence[Item], batch_size: int, read: Callable[[Item], Any] = read_rgb, desc: str | None = None
) -> Iterator[tuple[list[Item], list[Any]]]:
    """(items, their images) `batch_size` at a time, in order; `read` makes one item's image (by
    default the item is a path). While the caller works on one batch, the next `PREFETCH` batches are
    read in `WORKERS` threads, and nothing else: the loader holds at most batch_size x (1 + PREFETCH)
    images. A read error is raised here, when its batch is due. `desc` shows a progress bar."""
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, not {batch_size}")
    chunks = [list(items[start : start + batch_size]) for start in range(0, len(items), batch_size)]
    with ThreadPoolExecutor(WORKERS, thread_name_prefix="read-images") as pool:

        def submit(chunk: list[Item]) -> list[Future]:
            return [pool.submit(read, item) for item in chunk]

        upcoming = iter(chunks)
        ahead: deque[list[Future]] = deque()
        try:
            for chunk in tqdm(chunks, desc=desc, unit="batch", disable=desc is None):
                ahead.extend(submit(later) for later in itertools.islice(upcoming, 1 + PREFETCH - len(ahead)))
                images = [future.result() for future in ahead.popleft()]
                yield chunk, images
                del images  # the caller's now: the next batch is read only once the loader holds it no more
        finally:  # an error, or a caller that stopped early: read nothing more
            for futures in ahead:
                for future in futures:
                    future.cancel()


class OutOfMemory(RuntimeError):
    """One item that does not fit in the GPU's memory on its own: the job stops, its message one line."""


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is torch's out-of-memory error (without importing torch where nothing has)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(error, torch.OutOfMemoryError)


def _free_gpu_memory() -> None:
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _named(item: Any) -> str:
    """An item as a message names it: its file where it is one, or holds one; else its text, cut short."""
    found = next(
        (part for part in (item if isinstance(item, tuple) else (item,)) if isinstance(part, str | Path)), item
    )
    text = " ".join(str(found).split())
    return text if len(text) <= 100 else text[:99] + "…"


class Backoff:
    """A batched GPU call that runs out of memory, made again in halves: the batch that raised torch's
    `OutOfMemoryError` is split in two after the cache is freed, down to one item, and every later call is cut
    to the size that ran (`fits`), so the job goes on at that size; `noted(fits)` records it (a journal, so a
    retry of the job starts there). One item that does not fit is an `OutOfMemory` naming `what` (the model),
    the item and what torch asked for. Halves are other batches: a model's float sums, and a sampled answer's
    seed, may change in their last bits, as on another GPU."""

    def __init__(self, what: str, fits: int | None = None, noted: Callable[[int], None] | None = None):
        self.what, self.fits, self.noted = what, fits, noted

    def run(self, work: Callable[..., list], batch: list, *alongside: list) -> list:
        """`work(batch, *alongside)` (`alongside`: lists that pair with the batch item by item, its images),
        its results in order, in calls of at most `fits` items."""
        if self.fits and len(batch) > self.fits:
            size = self.fits  # a part that runs out of memory lowers `fits` for the parts after it, not the cuts
            return [
                result
                for start in range(0, len(batch), size)
                for result in self.run(work, batch[start : start + size], *(a[start : start + size] for a in alongside))
            ]
        try:
            return work(batch, *alongside)
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            asked = str(error).splitlines()[0] if str(error) else "out of memory"
        # Freed out here: inside the handler the error's traceback still holds the failed call's tensors.
        _free_gpu_memory()
        if len(batch) == 1:
            raise OutOfMemory(f"{self.what}: one item ({_named(batch[0])}) does not fit in the GPU's memory: {asked}")
        self.fits = (len(batch) + 1) // 2
        logging.getLogger(__name__).warning(
            "%s: %d items ran out of GPU memory (%s); going on %d at a time", self.what, len(batch), asked, self.fits
        )
        if self.noted:
            self.noted(self.fits)
        return self.run(work, batch, *alongside)


class Journaled(NamedTuple):
    """`journaled_batches`' answer: every item's result, and how many items this call worked on (the
    others' results came from the journal), which is what a job's throughput is measured over."""

    results: list
    computed: int


def journaled_batches(
    items: Sequence[Item],
    batch_size: int,
    read: Callable[[Item], Any],
    work: Callable[[list[Item], list[Any]], list],
    journal_path: str | Path,
    key: Any,
    desc: str | None = None,
) -> Journaled:
    """`work(batch, images)` over `image_batches` of `items`, its results (one JSON value per item) in
    the items' order. Each batch's results go to the journal at `journal_path` as it finishes, under a
    key of `key` (what else decides them: the model's `outputs`, its settings), the items and the batch
    size: a job killed midway does only the batches it had not finished, in the same batches as before
    (their make-up changes a model's floating-point sums, so only then are its results an uninterrupted
    job's). A retry with more memory, GPUs or another vLLM schedule goes on from the journal: its later
    batches may differ from an uninterrupted run's in the last bits, as any run on other GPUs does. A batch
    that runs out of GPU memory is made in halves (`Backoff`), and the size that ran is journaled."""
    from blindspot.io import BatchJournal, stable_id

    batches = [list(items[start : start + batch_size]) for start in range(0, len(items), batch_size)]
    with BatchJournal(journal_path, stable_id(key, batch_size, batches)) as journal:
        backoff = Backoff(desc or "a batched model", journal.fits, journal.record_fits)
        pending = [index for index in range(len(batches)) if index not in journal.done]
        if len(pending) < len(batches):
            logging.getLogger(__name__).info(
                "resuming from %s: %d of %d batches done already",
                journal_path,
                len(batches) - len(pending),
                len(batches),
            )
        # Every pending batch but the last is whole, so their items re-batch into the same batches.
        todo = [item for index in pending for item in batches[index]]
        for index, (batch, images) in zip(pending, image_batches(todo, batch_size, read, desc), strict=True):
            journal.record(index, backoff.run(work, batch, images))
        return Journaled([result for index in range(len(batches)) for result in journal.done[index]], len(todo))


class BackgroundWrites:
    """Image writes (PNG encoding, hashing) in `WORKERS` threads while the model makes the next images.
    `submit` returns the write's future at once unless `limit` writes are still pending; then it waits
    for the oldest, so at most `limit` images wait in memory. Leaving the block waits for every write,
    also when the block failed (so a failed job keeps what it made); a failed write is raised, and the
    writes behind it dropped."""

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"at least one write must be allowed to wait, not {limit}")
        self.limit = limit
        self.pending: deque[Future] = deque()
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="write-images")

    def __enter__(self) -> BackgroundWrites:
        return self

    def submit(self, write: Callable[..., Any], *args: Any) -> Future:
        while len(self.pending) >= self.limit:
            self.pending.popleft().result()
        future = self.pool.submit(write, *args)
        self.pending.append(future)
        return future

    def __exit__(self, *exc_info: object) -> None:
        try:
            while self.pending:
                self.pending.popleft().result()
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
