import os
import signal
import subprocess
import sys
import textwrap

import pandas as pd
import pyarrow as pa
import pytest

from blindspot.io import atomic_path, read_table, stable_id, write_table
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


def test_a_killed_writer_leaves_no_output(tmp_path):
    target = tmp_path / "out.txt"
    code = textwrap.dedent(f"""
        import time
        from blindspot.io import atomic_path
        with atomic_path({str(target)!r}) as tmp:
            tmp.write_text("half")
            print("writing", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not target.exists()
    leftovers = list(tmp_path.iterdir())
    assert all(p.name.startswith(".out.txt.") and p.suffix == ".tmp" for p in leftovers)


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
