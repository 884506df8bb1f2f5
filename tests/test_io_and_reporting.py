import errno
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pytest

from blindspot.io import (
    BatchJournal,
    atomic_path,
    is_temp_of,
    read_table,
    remove_stale_temps,
    stable_id,
    write_bytes,
    write_table,
    write_text,
)
from blindspot.reporting import latex_escape, to_latex, to_markdown, write_report_table

SCHEMA = pa.schema([("a", pa.string()), ("b", pa.float64())])


def test_a_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "out.parquet"

    def crash_mid_write():
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        crash_mid_write()
    assert list(tmp_path.iterdir()) == []


def test_write_bytes_makes_a_missing_folder_and_a_failed_one_leaves_nothing(tmp_path):
    write_bytes(tmp_path / "new" / "folder" / "image.png", b"pixels")
    assert (tmp_path / "new" / "folder" / "image.png").read_bytes() == b"pixels"
    (tmp_path / "taken").mkdir()
    with pytest.raises(IsADirectoryError):  # the rename onto a folder fails, after the temporary was written
        write_bytes(tmp_path / "taken", b"pixels")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["new", "taken"]


def test_write_bytes_finishes_a_partial_write_and_a_failed_one_closes_its_file(tmp_path, monkeypatch):
    """A write may take part of the bytes (a signal, a quota); one that fails (a full disk) leaves no
    temporary and no descriptor open in a job that writes thousands of files."""
    real_write = os.write
    with monkeypatch.context() as patched:
        patched.setattr(os, "write", lambda descriptor, data: real_write(descriptor, data[:3]))
        write_bytes(tmp_path / "image.png", b"pixels and more")
    assert (tmp_path / "image.png").read_bytes() == b"pixels and more"

    def disk_full(descriptor, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    open_before = len(os.listdir("/proc/self/fd"))
    with monkeypatch.context() as patched:
        patched.setattr(os, "write", disk_full)
        with pytest.raises(OSError, match="No space left"):
            write_bytes(tmp_path / "other.png", b"pixels")
    assert len(os.listdir("/proc/self/fd")) == open_before
    assert [path.name for path in tmp_path.iterdir()] == ["image.png"]


def test_a_write_into_an_existing_folder_neither_makes_folders_nor_removes_files(tmp_path, monkeypatch):
    """A render job writes an image and its sidecar per item, on a cluster's shared file system where
    each call is a wait, from a thread that hands the GIL back to the model's at each: a write is one
    create, write and rename, with no folder made and no temporary left to remove."""

    def refused(*args, **kwargs):
        raise AssertionError("a write into an existing folder called the file system needlessly")

    monkeypatch.setattr(os, "mkdir", refused)
    monkeypatch.setattr(os, "unlink", refused)
    write_bytes(tmp_path / "image.png", b"pixels")
    write_text(tmp_path / "image.sha256", "digest\n")
    with atomic_path(tmp_path / "table.parquet") as tmp:
        tmp.write_text("rows")
    assert {path.name: path.read_text() for path in tmp_path.iterdir()} == {
        "image.png": "pixels",
        "image.sha256": "digest\n",
        "table.parquet": "rows",
    }


def kill_writer(target, writer: str = "atomic_path") -> None:
    """Kill -9 a process halfway through writing `target` with blindspot.io's `writer`."""
    code = textwrap.dedent(f"""
        import time
        from blindspot.io import {writer}
        with {writer}({str(target)!r}) as tmp:
            (tmp / "part" if tmp.is_dir() else tmp).write_text("half")
            print("writing", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()


def test_a_killed_writer_leaves_no_output(tmp_path):
    target = tmp_path / "out.txt"
    kill_writer(target)
    assert not target.exists()
    leftovers = list(tmp_path.iterdir())
    assert len(leftovers) == 1
    assert is_temp_of(leftovers[0], target)


class Named(list):
    """A Snakemake job's named list (output, input, params, wildcards): a list of values with names."""

    def __init__(self, **items):
        super().__init__(items.values())
        self.named = items

    def keys(self):
        return self.named.keys()

    def items(self):
        return self.named.items()

    def __getattr__(self, name):
        try:
            return self.__dict__["named"][name]
        except KeyError:
            raise AttributeError(name) from None


def test_a_killed_job_resumes_from_its_journal(tmp_path):
    journal_path = tmp_path / "step.journal.jsonl"
    code = textwrap.dedent(f"""
        import time
        from blindspot.io import BatchJournal
        with BatchJournal({str(journal_path)!r}, "k1") as journal:
            for index in range(5):
                if index == 2:
                    journal.file.write('{{"batch": 2, "res')  # killed mid-line
                    journal.file.flush()
                    print("killed at 2", flush=True)
                    time.sleep(60)
                journal.record(index, ["text", index])
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "killed at 2"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    with BatchJournal(journal_path, "k1") as resumed:
        assert resumed.done == {0: ["text", 0], 1: ["text", 1]}  # the cut-off line is dropped
        resumed.record(2, ["text", 2])
    with BatchJournal(journal_path, "k1") as again:
        assert again.done == {index: ["text", index] for index in range(3)}
    with BatchJournal(journal_path, "k2") as other:  # another model or other settings: nothing is reused
        assert other.done == {}
    assert [path.name for path in tmp_path.iterdir()] == [journal_path.name]  # no temporaries left


def test_a_journal_removes_the_temporary_a_kill_left_while_it_was_rewritten(tmp_path):
    journal_path = tmp_path / "step.journal.jsonl"
    left = tmp_path / f".{journal_path.name}.0123abcd.tmp"  # as atomic_path names it
    left.write_text('{"key": "k1"}\n')
    assert is_temp_of(left, journal_path)
    with atomic_path(tmp_path / "other.journal.jsonl") as other:  # another job's journal, being rewritten
        with BatchJournal(journal_path, "k1"):
            pass
        assert sorted(tmp_path.iterdir()) == sorted([journal_path, other])


def test_the_next_run_of_a_job_removes_the_temporaries_a_killed_run_left(tmp_path, monkeypatch):
    from blindspot import steps

    table, folder = tmp_path / "out.parquet", tmp_path / "dataset"
    kill_writer(table)
    kill_writer(folder, "atomic_dir")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 2
    assert all(name.endswith(".tmp") for name in left)
    # Other jobs writing beside this one's outputs, one with a name that starts like this job's output.
    with atomic_path(tmp_path / "out.parquet.counters.json") as neighbour, atomic_path(tmp_path / "other") as other:
        seen = {}

        def step(out, dataset):
            seen["at start"] = sorted(p.name for p in tmp_path.iterdir())
            write_text(out, "done")

        monkeypatch.setattr(steps, "setup_logging", lambda log_path=None: None)  # the test's stderr stays
        monkeypatch.setattr(steps, "step_function", lambda name: step)
        job = SimpleNamespace(
            rule="export_dataset",
            output=Named(out=str(table), dataset=str(folder)),
            input=Named(),
            params=Named(),
            wildcards=Named(),
            log=[str(tmp_path / "logs" / "export_dataset.log")],
        )
        steps.run_from_snakemake(job)
        assert neighbour.exists()
        assert other.exists()
    assert seen["at start"] == sorted(["logs", neighbour.name, other.name])
    assert table.read_text() == "done"


def test_only_a_paths_own_temporaries_are_removed(tmp_path):
    target = tmp_path / "a.txt"
    kill_writer(target)
    (left,) = tmp_path.iterdir()
    unrelated = tmp_path / ".a.txt.notes.tmp"
    unrelated.write_text("someone else's")
    with atomic_path(tmp_path / "a.txt.b") as longer, atomic_path(tmp_path / "b") as other:
        assert remove_stale_temps([target, tmp_path / "absent" / "x"]) == [left]
        assert sorted(tmp_path.iterdir()) == sorted([longer, other, unrelated])


def test_stale_temporaries_are_found_listing_each_folder_once(tmp_path, monkeypatch):
    """A render job's thousands of images share the domain's folder: listing it per image would be
    quadratic in the folder's size."""
    targets = [tmp_path / f"{i}.png" for i in range(50)]
    kill_writer(targets[7])
    listed = []
    iterdir = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda folder: listed.append(folder) or iterdir(folder))
    (removed,) = remove_stale_temps([*targets, *(t.with_suffix(".sha256") for t in targets)])
    assert listed == [tmp_path]
    assert is_temp_of(removed, targets[7])


def test_tables_are_written_and_read_with_their_schema(tmp_path):
    frame = pd.DataFrame({"b": [1.5], "a": ["x"]})
    write_table(tmp_path / "t.parquet", frame, SCHEMA)
    assert read_table(tmp_path / "t.parquet", SCHEMA).equals(pd.DataFrame({"a": ["x"], "b": [1.5]}))
    with pytest.raises(ValueError, match=r"missing \['b'\], unexpected \['c'\]"):
        write_table(tmp_path / "u.parquet", pd.DataFrame({"a": ["x"], "c": [1]}), SCHEMA)
    with pytest.raises(ValueError, match="does not match its schema"):
        read_table(tmp_path / "t.parquet", pa.schema([("a", pa.string())]))


def test_stable_ids_depend_on_every_input():
    assert stable_id("a", {"x": 1}) == stable_id("a", {"x": 1})
    assert stable_id("a", {"x": 1}) != stable_id("a", {"x": 2})
    assert len(stable_id("a")) == 16


def test_latex_escapes_once():
    assert latex_escape("T -> D_c 50% & {x}") == r"T $\rightarrow$ D\_c 50\% \& \{x\}"
    assert latex_escape("D_c <-> D_a") == r"D\_c $\leftrightarrow$ D\_a"


def test_tables_in_three_formats(tmp_path):
    table = pd.DataFrame({"group": ["g"], "check": ["sim(T, D_c)"], "Animals": [0.87654], "Overall": [float("nan")]})
    assert to_markdown(table).splitlines()[2] == "| g | sim(T, D_c) | 0.877 | n/a |"
    latex = to_latex(table, "Cap_tion")
    assert r"\caption{Cap\_tion}" in latex
    assert r"g & sim(T, D\_c) & 0.877 & n/a \\" in latex
    write_report_table(table, tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "t.tex", "c")
    assert pd.read_csv(tmp_path / "t.csv")["Animals"][0] == pytest.approx(0.87654)
