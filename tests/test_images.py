import json
import os
import re
import threading
import time
import weakref

import numpy as np
import pytest
from PIL import Image

from blindspot import images
from blindspot.images import BackgroundWrites, ImageReadError, image_batches, read_rgb


def write_pngs(folder, n, size=16):
    """n PNG files, image i filled with grey level i (so each can be told from the others)."""
    paths = []
    for i in range(n):
        path = folder / f"{i:03d}.png"
        Image.new("L", (size, size), i).save(path)
        paths.append(path)
    return paths


class LiveImages:
    """Counts the decoded images that are still alive anywhere, and the most there ever were."""

    def __init__(self):
        self.lock = threading.Lock()
        self.live = self.peak = self.read = 0

    def __call__(self, path):
        image = read_rgb(path)
        with self.lock:
            self.live += 1
            self.read += 1
            self.peak = max(self.peak, self.live)
        weakref.finalize(image, self.gone)
        return image

    def gone(self):
        with self.lock:
            self.live -= 1


def test_batches_come_in_order_and_keep_their_items(tmp_path):
    paths = write_pngs(tmp_path, 10)
    got = list(image_batches(paths, 4))
    assert [batch for batch, _ in got] == [paths[0:4], paths[4:8], paths[8:10]]
    levels = [int(np.asarray(image)[0, 0, 0]) for _, batch in got for image in batch]
    assert levels == list(range(10))
    assert {image.mode for _, batch in got for image in batch} == {"RGB"}
    assert list(image_batches([], 4)) == []


@pytest.mark.parametrize("n", [12, 48])
def test_the_loader_holds_its_batch_and_one_batch_ahead_whatever_the_shard(tmp_path, n):
    batch_size = 3
    paths = write_pngs(tmp_path, n)
    counted = LiveImages()
    batches = 0
    for _, decoded in image_batches(paths, batch_size, counted):
        assert len(decoded) == batch_size
        if counted.read < n:  # the next batch is read while this one is worked on ...
            deadline = time.monotonic() + 10
            while counted.read < (batches + 1 + images.PREFETCH) * batch_size and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.05)  # ... and nothing beyond it
            assert counted.read == (batches + 1 + images.PREFETCH) * batch_size
        batches += 1
        del decoded  # a caller done with its batch keeps none of it
    assert batches == n // batch_size
    assert counted.peak == batch_size * (1 + images.PREFETCH)
    assert counted.live == 0


def test_a_file_that_does_not_decode_is_named_when_its_batch_is_due(tmp_path):
    paths = write_pngs(tmp_path, 6)
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(paths[4])
    paths[4].write_bytes(paths[4].read_bytes()[:2000])  # its header is whole, its pixels are cut short
    loader = image_batches(paths, 2)
    assert len(next(loader)[1]) == 2
    assert len(next(loader)[1]) == 2
    with pytest.raises(ImageReadError, match=re.escape(f"cannot read image {paths[4]}")):
        next(loader)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ImageReadError, match=re.escape(f"cannot read image {tmp_path / 'absent.png'}")):
        list(image_batches([tmp_path / "absent.png"], 2))


def test_background_writes_keep_at_most_the_limit_waiting_and_finish_all(tmp_path):
    release = threading.Event()
    written = []

    def write(image, path):
        release.wait(10)
        image.save(path)
        written.append(path)

    paths = [tmp_path / f"{i}.png" for i in range(5)]
    with BackgroundWrites(limit=2) as writes:
        for i, path in enumerate(paths[:2]):
            writes.submit(write, Image.new("RGB", (4, 4), (i, 0, 0)), path)
        blocked = threading.Thread(target=writes.submit, args=(write, Image.new("RGB", (4, 4)), paths[2]))
        blocked.start()
        blocked.join(0.2)
        assert blocked.is_alive()  # a third image waits until one of the two is written
        release.set()
        blocked.join(10)
        for path in paths[3:]:
            writes.submit(write, Image.new("RGB", (4, 4)), path)
    assert sorted(written) == sorted(paths)
    assert all(path.exists() for path in paths)


def test_a_failed_write_is_raised_when_the_block_ends(tmp_path):
    def write(image, path):
        raise OSError(f"disk full writing {path}")

    with pytest.raises(OSError, match="disk full writing"), BackgroundWrites(limit=4) as writes:
        writes.submit(write, Image.new("RGB", (4, 4)), tmp_path / "a.png")


def test_journaled_batches_resume_at_the_first_unfinished_batch(tmp_path):
    paths = [str(path) for path in write_pngs(tmp_path, 10)]
    journal, worked = tmp_path / "job.journal.jsonl", []

    def grey_levels(batch, pictures, kill_at=None):
        worked.append(len(batch))
        if len(worked) == kill_at:
            raise RuntimeError("the job is killed")
        return [int(np.asarray(picture)[0, 0, 0]) + 0.5 for picture in pictures]

    def run(key="model-a", kill_at=None, path=journal):
        work = lambda batch, pictures: grey_levels(batch, pictures, kill_at)  # noqa: E731
        return images.journaled_batches(paths, 4, read_rgb, work, path, key)

    with pytest.raises(RuntimeError, match="killed"):
        run(kill_at=3)  # the third and last batch (of 2 items) never finishes
    assert worked == [4, 4, 2]
    assert run() == ([level + 0.5 for level in range(10)], 2)
    assert worked == [4, 4, 2, 2]  # only the unfinished batch
    assert run() == ([level + 0.5 for level in range(10)], 0)
    assert worked == [4, 4, 2, 2]  # all journaled: nothing to do
    run(key="model-b")  # another model: its own results, from the start
    assert worked == [4, 4, 2, 2, 4, 4, 2]
    worked.clear()
    images.journaled_batches(paths, 5, read_rgb, grey_levels, journal, "model-b")  # other batches: afresh
    assert worked == [5, 5]


def test_a_batch_that_runs_out_of_gpu_memory_is_made_in_halves_and_a_retry_starts_at_the_size_that_ran(
    tmp_path, caplog
):
    """A model whose calls of more than two items raise torch's OutOfMemoryError: the job's results are those of a
    model that fits, its later batches are cut to the size that ran, and the journal tells a retry that size."""
    import torch

    paths = [str(path) for path in write_pngs(tmp_path, 10)]
    calls = []

    def grey_levels(batch, pictures):
        calls.append(len(batch))
        if len(batch) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 80 GiB total)")
        return [int(np.asarray(picture)[0, 0, 0]) + 0.5 for picture in pictures]

    journal = tmp_path / "job.journal.jsonl"
    with caplog.at_level("WARNING"):
        found = images.journaled_batches(paths, 4, read_rgb, grey_levels, journal, "model-a", desc="model-a")
    assert found == ([level + 0.5 for level in range(10)], 10)
    assert calls == [4, 2, 2, 2, 2, 2]  # the first batch failed whole, then every call at the two that ran
    assert "model-a: 4 items ran out of GPU memory (CUDA out of memory. Tried to allocate 2.00 GiB" in caplog.text
    # killed afterwards, the job's retry starts at two items a call: its journal says so
    lines = journal.read_text().splitlines()
    assert json.loads(lines[1]) == {"fits": 2}  # written when it ran out, before the first batch's results
    journal.write_text("\n".join(lines[:3]) + "\n")  # the first batch done
    calls.clear()
    again = images.journaled_batches(paths, 4, read_rgb, grey_levels, journal, "model-a", desc="model-a")
    assert again.results == found.results
    assert calls == [2, 2, 2]  # batches 2 and 3 (4 + 2 items), never a call of four

    def nothing_fits(batch, pictures):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 90.00 GiB")

    with pytest.raises(images.OutOfMemory) as error:
        images.journaled_batches(paths, 4, read_rgb, nothing_fits, tmp_path / "other.jsonl", "model-b", desc="model-b")
    assert str(error.value) == (
        f"model-b: one item ({paths[0]}) does not fit in the GPU's memory: CUDA out of memory. Tried to allocate "
        "90.00 GiB"
    )
    with pytest.raises(ValueError, match="not memory"):  # any other error is the model's own
        images.Backoff("model-c").run(lambda batch: (_ for _ in ()).throw(ValueError("not memory")), [1, 2])


def test_a_batch_halved_twice_keeps_every_item_in_order():
    """Eight items on a GPU that fits two: halved to four, whose first half runs out of memory again; the
    second half is cut at the size that ran, and no item is lost (bench/peers/out_of_memory.py found this)."""
    import torch

    calls = []

    def doubled(batch):
        calls.append(len(batch))
        if len(batch) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return [item * 2 for item in batch]

    backoff = images.Backoff("model-d")
    assert backoff.run(doubled, list(range(8))) == [item * 2 for item in range(8)]
    assert calls == [8, 4, 2, 2, 2, 2]
    assert backoff.fits == 2


def test_images_decode_in_as_many_threads_as_the_job_has_cpus(monkeypatch):
    """Snakemake gives a job its `threads` as OMP_NUM_THREADS (8 per GPU on the paper config): the loader's
    threads; without it, the CPUs the process may run on."""
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert images._job_cpus() == 8
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert images._job_cpus() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    assert images._job_cpus() == len(os.sched_getaffinity(0))
    assert images.WORKERS >= 2
