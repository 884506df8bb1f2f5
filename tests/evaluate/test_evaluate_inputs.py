"""Every input `blindspot evaluate` cannot use is refused with one line naming its file (and the row or
column): images, tables, releases, --compare files and the tables the run leaves, before the workflow
starts where it can; and a workflow that fails anyway says which job, why and where its log is."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.evaluate import _cut, noise_png, pairs_csv
from helpers.workflow import REPO
from PIL import Image

import blindspot.api
from blindspot.config import ConfigError
from blindspot.evaluate import run as evaluate_run
from blindspot.evaluate.failure import failed_jobs, last_line, workflow_failure
from blindspot.images import ImageReadError, check_images

TINY = str(REPO / "config" / "tiny.yaml")
QUESTION = "What is it?\nA. a\nB. b\nC. c\nD. d\nE. None of the above"
VLM = "tiny-qwen2.5-vl"


def release_jsonl(folder: Path, records: list[dict] | None = None) -> Path:
    """Three questions q0, q1, q2, each about its own image (p0.png, ...), or `records`."""
    if records is None:
        records = [
            {
                "question_id": f"q{i}",
                "question": QUESTION,
                "label": "E",
                "type": "Object",
                "image": noise_png(folder / f"p{i}.png", i).name,
            }
            for i in range(3)
        ]
    (folder / "release.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return folder / "release.jsonl"


@pytest.fixture
def no_workflow(monkeypatch, tmp_path):
    """Whatever is refused is refused before the workflow starts; the command runs from `tmp_path`."""

    def started(*args):
        raise AssertionError("the workflow started")

    monkeypatch.setattr(evaluate_run, "run_workflow", started)
    monkeypatch.chdir(tmp_path)


def refused(capsys, benchmark: str, source: Path, *more: str) -> str:
    """The line `blindspot evaluate` stops with on `source`; `blindspot.api.evaluate` raises the same as a
    ConfigError."""
    from blindspot.cli import main

    options = ["--configfile", TINY, "--results-dir", "out", *more]
    what = (
        ["--dataset", str(source), "--metric", "clipscore"]
        if benchmark == "protobias"
        else ["--release", str(source), "--vlm", VLM]
    )
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", benchmark, *what, *options])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    line = err.strip()
    keywords = (
        {"dataset": str(source), "metrics": ["clipscore"]}
        if benchmark == "protobias"
        else {"release": str(source), "vlms": [VLM]}
    )
    compare = [more[i + 1] for i, option in enumerate(more) if option == "--compare"]
    with pytest.raises(ConfigError) as error:
        blindspot.api.evaluate(benchmark, configfile=TINY, results_dir="out", compare=compare, **keywords)
    assert f"blindspot: error: {error.value}" == line
    return line.removeprefix("blindspot: error: ")


def _missing(path: Path) -> None:
    path.unlink()


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _text(path: Path) -> None:
    path.write_text("not an image, only named like one")


BAD_IMAGES = {
    "missing": (_missing, "no such file"),
    "a folder": (_folder, "a folder, not an image file"),
    "truncated": (_cut, "truncated (Pillow: Truncated File Read)"),
    "text named .png": (_text, "not an image (Pillow cannot identify it)"),
}


@pytest.mark.parametrize("bad", BAD_IMAGES)
def test_a_bad_image_of_a_dataset_is_named_with_its_row_and_column_before_the_run(tmp_path, capsys, no_workflow, bad):
    dataset = pairs_csv(tmp_path)
    spoil, problem = BAD_IMAGES[bad]
    spoil(tmp_path / "b1.png")
    assert (
        refused(capsys, "protobias", dataset)
        == f"dataset {dataset}, row 2 (image_adv): {tmp_path / 'b1.png'}: {problem}"
    )


@pytest.mark.parametrize("bad", BAD_IMAGES)
def test_a_bad_image_of_a_release_is_named_with_its_question_before_the_run(tmp_path, capsys, no_workflow, bad):
    release = release_jsonl(tmp_path)
    spoil, problem = BAD_IMAGES[bad]
    spoil(tmp_path / "p2.png")
    assert (
        refused(capsys, "humblebench", release) == f"release {release}, question q2: {tmp_path / 'p2.png'}: {problem}"
    )


def test_an_image_that_comes_as_bytes_is_read_whole_too(tmp_path, capsys, no_workflow):
    """A parquet table holding its images (as `datasets` does): a cut-off one is named by its row."""
    images = [noise_png(tmp_path / f"i{i}.png", i).read_bytes() for i in range(2)]
    rows = [
        {
            "neutral_prompt": "a cat",
            "image_corr": {"bytes": images[0], "path": None},
            "image_adv": {"bytes": images[1][:300], "path": None},
        }
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "pairs.parquet")
    assert refused(capsys, "protobias", tmp_path / "pairs.parquet") == (
        f"dataset {tmp_path / 'pairs.parquet'}, row 1 (image_adv): its image bytes: "
        "truncated (Pillow: Truncated File Read)"
    )
    release = [{"question_id": "q9", "question": QUESTION, "label": "E", "type": "Object", "image": images[1][:300]}]
    pd.DataFrame(release).to_parquet(tmp_path / "release.parquet")
    assert refused(capsys, "humblebench", tmp_path / "release.parquet") == (
        f"release {tmp_path / 'release.parquet'}, question q9: its image bytes: truncated (Pillow: Truncated File Read)"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_image_or_table_is_named(tmp_path, capsys, no_workflow):
    dataset = pairs_csv(tmp_path)
    (tmp_path / "g0.png").chmod(0)
    assert refused(capsys, "protobias", dataset) == (
        f"dataset {dataset}, row 1 (image_corr): {tmp_path / 'g0.png'}: cannot be read (Permission denied)"
    )
    dataset.chmod(0)
    assert refused(capsys, "protobias", dataset) == f"{dataset}: Permission denied"
    release = release_jsonl(tmp_path)
    release.chmod(0)
    assert refused(capsys, "humblebench", release) == f"{release}: Permission denied"


def test_a_malformed_row_of_a_dataset_is_named_with_its_row_and_column(tmp_path, capsys, no_workflow):
    dataset = pairs_csv(tmp_path)
    dataset.write_text(dataset.read_text() + "a dog,g0.png,b0.png,b1.png\n")
    assert refused(capsys, "protobias", dataset) == (
        f"dataset {dataset}: not a CSV (Error tokenizing data. C error: Expected 3 fields in line 5, saw 4)"
    )
    dataset.write_text("neutral_prompt,image_corr,image_adv\na cat,g0.png,b0.png\n,g1.png,b1.png\n")
    assert refused(capsys, "protobias", dataset) == (
        f"dataset {dataset}, row 2 (neutral_prompt): empty, where the pair's neutral_prompt belongs"
    )
    # A CSV is text: ids that look like numbers stay ids, and a seed is a whole number.
    dataset.write_text(
        "neutral_prompt,image_corr,image_adv,pair_id,seed\na cat,g0.png,b0.png,7,3\nb,g1.png,b1.png,8,x\n"
    )
    assert refused(capsys, "protobias", dataset) == f"dataset {dataset}, pair 8 (seed): str 'x', not a whole number"
    lines = [
        {"neutral_prompt": "a cat", "image_corr": "g0.png", "image_adv": "b0.png"},
        {"neutral_prompt": 5, "image_corr": "g1.png", "image_adv": "b1.png"},
        {"neutral_prompt": "a dog", "image_corr": "g2.png"},
    ]
    table = tmp_path / "pairs.jsonl"
    table.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert refused(capsys, "protobias", table) == f"dataset {table}, row 2 (neutral_prompt): int 5, not text"
    lines[1]["neutral_prompt"] = "a cat"
    table.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert (
        refused(capsys, "protobias", table)
        == f"dataset {table}, row 3 (image_adv): no image (a path or an image's bytes)"
    )


def test_a_malformed_record_of_a_release_is_named_with_its_question(tmp_path, capsys, no_workflow):
    record = {
        "question_id": "q1",
        "question": QUESTION,
        "label": "E",
        "type": "Object",
        "image": noise_png(tmp_path / "p.png", 0).name,
    }
    for change, problem in (
        ({"label": 3}, "question q1: its label is int 3, not text"),
        ({"label": "Z"}, "question q1: label 'Z' is not one of its option letters"),
        ({"question": "What?"}, "question q1: no stem and lettered options in 'What?'"),
        ({"question_id": None}, "record 2's question_id is None, not text or a number"),
        ({"question_id": "q0"}, "question q0: given twice, by records 1 and 2 (counted from 1)"),
    ):
        release = release_jsonl(tmp_path, [record | {"question_id": "q0"}, record | change])
        separator = ":" if problem.startswith("record") else ","
        assert refused(capsys, "humblebench", release) == f"release {release}{separator} {problem}"


def test_a_compare_file_that_is_not_the_tables_csv_stops_before_the_run(tmp_path, capsys, no_workflow):
    dataset = pairs_csv(tmp_path)
    (tmp_path / "rows.csv").write_bytes(noise_png(tmp_path / "rows.png", 0).read_bytes())  # an image named .csv
    assert refused(capsys, "protobias", dataset, "--compare", "rows.csv") == (
        f"--compare {tmp_path / 'rows.csv'}: not UTF-8 text (invalid start byte)"
    )
    pd.DataFrame({"vlm": ["x"], "accuracy": [0.5]}).to_csv(tmp_path / "humble.csv", index=False)
    assert refused(capsys, "protobias", dataset, "--compare", "humble.csv") == (
        f"--compare {tmp_path / 'humble.csv'}: no column 'Method' (a CSV with the table's columns)"
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"Method,Overall Acc\nCLIPScore,0.5", "cut short (its last row has no line end)"),
        (b"vlm,setting\nx,original\n", "no column 'Method', so not the table the run writes"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text (invalid start byte)"),
    ],
)
def test_a_table_the_run_left_that_is_not_its_table_is_named(tmp_path, monkeypatch, content, problem):
    """What the run leaves is read back: a table cut short, or another file in its place, is one line."""
    monkeypatch.chdir(tmp_path)
    pairs_csv(tmp_path)
    table = tmp_path / "out" / "tables" / "table3_metrics.csv"

    def leaves_the_table(configfile, profile, cores):
        table.parent.mkdir(parents=True, exist_ok=True)
        table.write_bytes(content)

    monkeypatch.setattr(evaluate_run, "run_workflow", leaves_the_table)
    with pytest.raises(ConfigError) as error:
        blindspot.api.evaluate(
            "protobias", dataset="pairs.csv", metrics=["clipscore"], configfile=TINY, results_dir="out"
        )
    assert str(error.value) == f"the run's Table 3 {table}: {problem}"


def test_the_command_prints_one_line_and_no_traceback(tmp_path):
    """As a person runs it: a truncated image is one line on stderr, before the workflow writes anything."""
    dataset = pairs_csv(tmp_path)
    _cut(tmp_path / "g2.png")
    environment = os.environ | {"PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "blindspot.cli",
            "evaluate",
            "protobias",
            "--dataset",
            "pairs.csv",
            "--metric",
            "clipscore",
            "--results-dir",
            "out",
        ],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"blindspot: error: dataset {dataset}, row 3 (image_corr): {tmp_path / 'g2.png'}: "
        "truncated (Pillow: Truncated File Read)\n"
    )
    assert not (tmp_path / "out" / "evaluate_config.yaml").exists()


def test_the_import_job_stops_with_the_same_line(tmp_path):
    """A hub dataset's images are first read in its import job: the job's reason, the last line of its log
    (`run_step`), is the line the command gives for a local dataset."""
    from blindspot.steps import run_step

    dataset = pairs_csv(tmp_path)
    _text(tmp_path / "g0.png")
    outputs = {name: [str(tmp_path / f"{name}.parquet")] for name in ("pairs", "triplets", "seeds")}
    with pytest.raises(SystemExit) as stopped:
        run_step(
            "import_dataset",
            source_copy=[str(dataset)],
            source=str(dataset),
            columns={},
            n_seeds={"all": 3},
            benchmark=str(tmp_path / "b.parquet"),
            images=str(tmp_path / "images"),
            counters_out=str(tmp_path / "c.json"),
            limit=None,
            **outputs,
        )
    assert stopped.value.code == (
        f"dataset {dataset}, row 1 (image_corr): {tmp_path / 'g0.png'}: not an image (Pillow cannot identify it)"
    )


def test_images_are_checked_in_order_each_file_once(tmp_path):
    good = [noise_png(tmp_path / f"{i}.png", i) for i in range(3)]
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / "photo.jpg")
    assert check_images([("a", good[0]), ("b", good[1]), ("again", good[0]), ("j", tmp_path / "photo.jpg")]) == 3
    data = (tmp_path / "photo.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) - 200])
    (tmp_path / "flipped.png").write_bytes(good[2].read_bytes()[:100] + b"\xff" + good[2].read_bytes()[101:])
    # the first bad one in order is named, as its caller names it
    with pytest.raises(ImageReadError, match=r"^first: damaged \(Pillow: broken PNG file \(bad header checksum"):
        check_images([("first", tmp_path / "flipped.png"), ("second", tmp_path / "cut.jpg")])
    with pytest.raises(ImageReadError, match=r"^second: truncated \(Pillow: "):
        check_images([("first", good[2]), ("second", tmp_path / "cut.jpg")])


SNAKEMAKE_LOG = """\
  Command: /x/snakemake --snakefile /c/workflow/Snakefile --configfile {config} --directory /c --cores 1
Execute 1 jobs...
localrule make_humble_questions:
    log: {job_log}
    jobid: 3
RuleException:
CalledProcessError in file "/c/workflow/rules/humble.smk", line 73:
Error in rule make_humble_questions:
    message: None
    jobid: 3
    log: {job_log} (check log file(s) for error details)
Error in rule answer_humble:
    message: None
    jobid: 7
    wildcards: vlm=tiny-qwen2.5-vl, shard=00000
    log: logs/answer_humble/{{vlm}}.log (check log file(s) for error details)
Error in rule make_humble_questions:
    jobid: 3
    log: {job_log} (check log file(s) for error details)
Shutting down, this might take some time.
Exiting because a job execution failed. Look above for error messages
"""


def test_a_failed_workflow_is_one_line_naming_the_job_its_reason_and_its_log(tmp_path):
    config, job_log = tmp_path / "out" / "evaluate_config.yaml", tmp_path / "out" / "logs" / "make.log"
    logs = tmp_path / ".snakemake" / "log"
    logs.mkdir(parents=True)
    snakemake_log = logs / "2026-01-02T030405.000000.snakemake.log"
    snakemake_log.write_text(SNAKEMAKE_LOG.format(config=config, job_log=job_log))
    jobs = failed_jobs(snakemake_log.read_text(), tmp_path)
    assert [(job.rule, job.wildcards) for job in jobs] == [
        ("make_humble_questions", ""),
        ("answer_humble", "vlm=tiny-qwen2.5-vl, shard=00000"),
    ]
    assert jobs[1].logs == (tmp_path / "logs" / "answer_humble" / "{vlm}.log",)  # relative: where Snakemake ran
    assert workflow_failure(config, tmp_path) == (
        f"the workflow's job make_humble_questions failed: its log {job_log} is missing; Snakemake's log: "
        f"{snakemake_log} (1 more job(s) failed, in Snakemake's log: {snakemake_log})"
    )
    job_log.parent.mkdir(parents=True)
    job_log.write_text(
        "INFO loading\nTraceback ...\n  ValueError: x\nrelease r.jsonl, question q1: p.png: no such file\n\n"
    )
    assert workflow_failure(config, tmp_path).startswith(
        f"the workflow's job make_humble_questions failed: release r.jsonl, question q1: p.png: no such file; "
        f"its log: {job_log} (1 more"
    )
    job_log.write_text("answering: 10%|#  | 1/10\ranswering: 20%|## | 2/10\r")  # a job killed midway: its progress
    assert last_line(job_log) == "answering: 20%|## | 2/10"
    # A run that failed before any job: Snakemake's log; a newer run on another config: not this one's.
    snakemake_log.write_text(f"--configfile {config}\nMissingInputException in rule all\n")
    assert workflow_failure(config, tmp_path) == (
        f"the workflow failed on {config}; Snakemake's log says why: {snakemake_log}"
    )
    (logs / "2026-01-02T030406.000000.snakemake.log").write_text("--configfile other.yaml\n")
    assert workflow_failure(config, tmp_path) == (
        f"the workflow failed on {config}; its log says why (above, and in {logs})"
    )


@pytest.mark.slow
@pytest.mark.integration
def test_an_image_that_turns_bad_after_the_check_fails_its_job_and_the_command_says_why(tmp_path, monkeypatch, capsys):
    """The workflow runs for real: the release's image, read whole before it started, is no image when the
    questions job reads it; the command's last line is that job's reason and its log."""
    from blindspot.cli import main

    monkeypatch.chdir(tmp_path)
    release = release_jsonl(tmp_path)
    run_workflow = evaluate_run.run_workflow

    def spoiled_then_run(configfile, profile, cores):
        _text(tmp_path / "p1.png")
        run_workflow(configfile, profile, cores)

    monkeypatch.setattr(evaluate_run, "run_workflow", spoiled_then_run)
    with pytest.raises(SystemExit):
        main(
            [
                "evaluate",
                "humblebench",
                "--release",
                str(release),
                "--vlm",
                VLM,
                "--configfile",
                TINY,
                "--results-dir",
                "out",
            ]
        )
    job_log = tmp_path / "out" / "logs" / "make_humble_questions" / "all.log"
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"blindspot: error: the workflow's job make_humble_questions failed: release {release}, question q1: "
        f"{tmp_path / 'p1.png'}: not an image (Pillow cannot identify it); its log: {job_log}"
    )
    config = yaml.safe_load((tmp_path / "out" / "evaluate_config.yaml").read_text())
    assert config["humblebench"]["release"] == str(release)


def test_bytes_not_an_image_are_named(tmp_path):
    from blindspot.images import store_image_bytes

    with pytest.raises(ValueError, match=r"^row 4: its image bytes: not an image \(Pillow cannot identify it\)$"):
        store_image_bytes(b"plain text", tmp_path, "row 4")


def test_the_original_setting_alone_runs_and_says_which_tables_it_leaves_out(tmp_path, capsys, tiny_config):
    """`--setting original` answers the Original setting alone (what the paper asks of its proprietary
    models); Table 7's stress column and the appendix table, which need another setting, are left out in
    one line each. A set without Table 4's setting is refused."""
    from blindspot.checks import validate_config
    from blindspot.evaluate.config import humblebench_config

    release = release_jsonl(tmp_path)
    config = humblebench_config(tiny_config, str(release), [VLM], ["original"], str(tmp_path / "out"))
    validate_config(config)
    assert list(config["humblebench"]["settings"]) == ["original"]
    assert config["humblebench"]["tables"] == {"original": "original"}
    assert capsys.readouterr().err.splitlines() == [
        "blindspot evaluate: Table 7's stress column left out: it needs the setting nota_only",
        "blindspot evaluate: the appendix's Original -> Cautious table left out: it needs the setting cautious",
    ]
    from blindspot import targets
    from blindspot.registry import vlm_settings

    assert vlm_settings(config, VLM) == ["original"]  # what its answer jobs ask
    assert len(targets.humble_answer_targets(config)) == config["humblebench"]["answer_shards"]
    with pytest.raises(ConfigError, match="--setting: Table 4 needs the setting original"):
        humblebench_config(tiny_config, str(release), [VLM], ["nota_only"], str(tmp_path / "out"))


def test_a_vlm_named_by_its_folder_gets_an_entry_derived_and_printed_to_paste(
    tmp_path, capsys, monkeypatch, tiny_config
):
    """`--vlm FOLDER`: no registry entry needed. The entry derived from the folder's config.json is in the config
    the run writes, and printed as YAML that reads back as that entry under `models:`."""
    from transformers import Qwen2_5_VLConfig

    from blindspot.checks import validate_config
    from blindspot.evaluate.config import humblebench_config, model_here

    folder = tmp_path / "Fresh-Checkpoint"
    Qwen2_5_VLConfig().save_pretrained(folder)
    (tmp_path / "release").mkdir()
    release = release_jsonl(tmp_path / "release")
    config = humblebench_config(tiny_config, str(release), [str(folder)], [], str(tmp_path / "out"))
    validate_config(config)
    assert config["humblebench"]["vlms"] == ["fresh-checkpoint"]
    entry = config["models"]["fresh-checkpoint"]
    assert entry == {"id": str(folder), "backend": "transformers", "gpus": 1, "weights_gb": 0.0, "dtype": "float32"}
    said = capsys.readouterr().err
    first, pasted = said.split("\n", 1)
    assert first == (
        f"blindspot evaluate: models.fresh-checkpoint derived from {folder}'s config.json (paste it under a "
        "config's models: to keep it):"
    )
    assert yaml.safe_load(pasted) == {"fresh-checkpoint": entry}
    # named from the folder the command runs in; a registry name wins over a folder of its name
    monkeypatch.chdir(tmp_path)
    (tmp_path / VLM).mkdir()
    assert (model_here(tiny_config, "Fresh-Checkpoint"), model_here(tiny_config, VLM)) == (str(folder), VLM)


def test_a_hub_id_or_folder_the_registry_has_is_its_entry(tiny_config, capsys):
    """The paper config's Qwen2.5-VL-7B named by its hub id is its registry entry, with its protocol and GPUs."""
    from blindspot.evaluate.config import model_entry

    paper = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert model_entry(paper, "Qwen/Qwen2.5-VL-7B-Instruct") == "qwen2.5-vl-7b-instruct"
    assert capsys.readouterr().err == (
        "blindspot evaluate: Qwen/Qwen2.5-VL-7B-Instruct is models.qwen2.5-vl-7b-instruct of the config\n"
    )
