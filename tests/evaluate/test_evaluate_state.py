"""An evaluation's Snakemake state lives in its results folder: evaluations run side by side, and one killed
with SIGKILL runs again with the same command and goes on from the jobs that finished."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.evaluate import evaluate_humblebench
from helpers.images import grey_image
from helpers.workflow import REPO

from blindspot.config import ConfigError


def table(results: Path) -> pd.DataFrame:
    return pd.read_csv(results / "tables" / "humblebench_metrics.csv")


def finished_jobs(results: Path) -> dict[Path, int]:
    """Each finished job's benchmark file (Snakemake writes it when the job ends), with its modification time."""
    return {path: path.stat().st_mtime_ns for path in (results / "benchmarks").rglob("*.tsv")}


@pytest.mark.slow
@pytest.mark.integration
def test_two_evaluations_with_their_own_results_folders_run_at_once_and_both_finish(side_by_side):
    by_command, by_python = side_by_side
    pd.testing.assert_frame_equal(table(by_command), table(by_python))
    printed = (by_python.parent / "python.out").read_text().splitlines()
    assert [line.split() for line in printed if "nota_hit" in line] == [
        ["vlm", "setting", "reading", "overall", "nota_hit"]
    ]
    for results in side_by_side:  # each folder holds its own Snakemake state; the checkout's is not used
        assert list((results / ".snakemake" / "metadata").iterdir())
        assert json.loads((results / "tables" / "evaluate_humblebench.json").read_text())["vlms"]


@pytest.mark.slow
@pytest.mark.integration
def test_a_killed_evaluate_runs_again_with_the_same_command_and_does_no_finished_job_twice(
    humble_release, side_by_side, tmp_path
):
    """A closed terminal or a killed login session: SIGKILL to the command and everything it started, while
    a job runs. The same command then finds the stale lock, goes on, and gives the uninterrupted run's table."""
    results = tmp_path / "killed"
    # its own session: the kill reaches the command, Snakemake and the running job, as a closed terminal's would
    run = subprocess.Popen(
        evaluate_humblebench(humble_release, results),
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    answers, deadline = results / "benchmarks" / "answer_humble", time.monotonic() + 900
    while True:  # a job done (the questions'), and an answer job (one a VLM asks every setting) started, not done
        done = {path.relative_to(answers).with_suffix("") for path in answers.rglob("*.tsv")}
        started = {
            path.relative_to(results / "logs" / "answer_humble").with_suffix("")
            for path in (results / "logs" / "answer_humble").rglob("*.log")
        }
        if any((results / "benchmarks").rglob("*.tsv")) and started - done:
            break
        assert run.poll() is None, "the run ended before a job could be cut off"
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    assert list((results / ".snakemake" / "locks").glob("*")), "the killed run left no lock to find"
    before = finished_jobs(results)

    again = subprocess.run(
        evaluate_humblebench(humble_release, results), cwd=tmp_path, capture_output=True, text=True, timeout=1200
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"a killed run left Snakemake's lock in {results}; unlocking" in again.stderr
    pd.testing.assert_frame_equal(table(results), table(side_by_side[0]))
    after = finished_jobs(results)
    assert {path: after[path] for path in before} == before  # no finished job ran again
    assert set(after) > set(before)  # the one cut off, and those after it, ran


def test_a_second_evaluate_of_a_results_folder_stops_with_one_line_while_the_first_holds_it(tmp_path):
    from blindspot.evaluate.run import held_folder

    with held_folder(tmp_path), pytest.raises(ConfigError) as refused, held_folder(tmp_path):
        pass
    assert str(refused.value) == (
        f"--results-dir {tmp_path}: another `blindspot evaluate` runs there (pid {os.getpid()}); wait for it, or "
        "give this one another --results-dir"
    )
    with held_folder(tmp_path):  # let go when the first ends
        pass


def test_the_written_config_names_the_checkouts_files_so_the_run_starts_in_its_results_folder(tmp_path, monkeypatch):
    from blindspot.evaluate import run as evaluate_run

    monkeypatch.chdir(tmp_path)
    grey_image(tmp_path / "pixel.png", 128)
    record = {
        "question_id": "q1",
        "label": "E",
        "type": "Object",
        "image": "pixel.png",
        "question": "What is it?\nA. a\nB. b\nC. c\nD. d\nE. None of the above",
    }
    (tmp_path / "release.jsonl").write_text(json.dumps(record) + "\n")
    ran = []
    monkeypatch.setattr(evaluate_run, "run_workflow", lambda configfile, profile, cores: ran.append(configfile))
    monkeypatch.setattr(evaluate_run, "result_table", lambda config, benchmark: pd.DataFrame({"vlm": []}))
    evaluate_run.evaluate("humblebench", release="release.jsonl", vlms=["tiny-qwen2.5-vl"], results_dir="out")
    written = yaml.safe_load(ran[0].read_text())
    tiny = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    assert written["resources_dir"] == str(REPO / tiny["resources_dir"])
    assert written["domains"]["animals"]["taxonomy"] == str(REPO / tiny["domains"]["animals"]["taxonomy"])
    assert written["humblebench"]["settings"]["original"]["template"] == str(
        REPO / tiny["humblebench"]["settings"]["original"]["template"]
    )
    archive = tiny["models"]["niqe"]["build"]["archive"]
    assert written["models"]["niqe"]["build"]["archive"] == str(REPO / archive)
    # a hub id stays one; the release and results folder were absolute already
    assert written["models"]["tiny-qwen2.5-vl"].get("id") == tiny["models"]["tiny-qwen2.5-vl"].get("id")
    assert written["humblebench"]["release"] == str(tmp_path / "release.jsonl")
    assert ran[0].parent == tmp_path / "out"
