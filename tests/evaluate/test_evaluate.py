"""A benchmark from a released dataset (`dataset:`), `blindspot evaluate`, and its recorded rows."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.evaluate import GOOD_RECORD
from helpers.images import grey_image
from helpers.workflow import REPO

from blindspot import targets
from blindspot.protobias.released import DatasetError, read_test_pairs


def test_the_export_reads_back_as_its_test_pairs_with_the_same_images(exported, tmp_path):
    benchmark, folder = exported
    pairs = read_test_pairs(str(folder), {}, tmp_path / "images")
    test = benchmark[benchmark["split"] == "test"].set_index("pair_id")
    assert sorted(pairs["pair_id"]) == sorted(test.index)
    assert list(pairs["domain"]) == sorted(pairs["domain"])  # ordered as the workflow orders its own
    for row in pairs.itertuples():
        assert Path(row.corr_path).read_bytes() == Path(test.loc[row.pair_id, "corr_path"]).read_bytes()
        assert row.neutral_prompt == test.loc[row.pair_id, "neutral_prompt"]
        assert row.knob == "count"
        assert row.split == "test"


def test_a_foreign_table_is_read_through_its_column_mapping(tmp_path):
    rows = [
        {"caption": f"a cat {i}", "good": grey_image(tmp_path / f"g{i}.png", i), "bad": f"b{i}.png"} for i in range(3)
    ]
    for i in range(3):
        grey_image(tmp_path / f"b{i}.png", 100 + i)  # relative to the table's folder
    pd.DataFrame(rows).to_csv(tmp_path / "pairs.csv", index=False)
    columns = {"neutral_prompt": "caption", "image_corr": "good", "image_adv": "bad"}
    pairs = read_test_pairs(str(tmp_path / "pairs.csv"), columns, tmp_path / "images")
    assert sorted(pairs["neutral_prompt"]) == ["a cat 0", "a cat 1", "a cat 2"]
    assert set(pairs["domain"]) == {"all"}
    assert pairs["pair_id"].is_unique
    assert (pairs["triplet_id"] == pairs["pair_id"]).all()
    assert all(path.startswith(str(tmp_path / "images")) for path in pairs["adv_path"])


def test_a_missing_column_is_named(tmp_path):
    pd.DataFrame([{"caption": "a cat", "good": "g.png"}]).to_csv(tmp_path / "pairs.csv", index=False)
    with pytest.raises(DatasetError, match=r"no column 'image_adv' for image_adv.*dataset.columns.image_adv"):
        read_test_pairs(str(tmp_path / "pairs.csv"), {"neutral_prompt": "caption", "image_corr": "good"}, tmp_path)
    with pytest.raises(DatasetError, match=r"no column 'bad' \(dataset.columns.image_adv\)"):
        read_test_pairs(str(tmp_path / "pairs.csv"), {"neutral_prompt": "caption", "image_adv": "bad"}, tmp_path)


def _released_config(tiny_config, tmp_path, dataset):
    config = tiny_config | {"results_dir": str(tmp_path / "results"), "dataset": {"path": dataset}}
    config["humblebench"] |= {"from_benchmark": None}
    config["evaluation"]["metrics"] = {"clipscore": config["evaluation"]["metrics"]["clipscore"]}
    return config


@pytest.mark.integration
def test_with_a_dataset_nothing_is_built_and_table3_is_made_from_it(tiny_config, tmp_path, exported):
    config = _released_config(tiny_config, tmp_path, str(exported[1]))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", str(tmp_path / "c.yaml"), "--quiet", "rules"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    stats = (result.stdout + result.stderr).split("Job stats:")[1].split("total")[0]
    rules = set(re.findall(r"^(\w+)\s+\d+$", stats, flags=re.MULTILINE))
    # build_model too, where the tiny models are not built yet
    assert (
        {"import_dataset", "score_metric", "make_table3", "write_protobias_records", "build_item_view", "all"}
        <= rules
        <= {
            "build_model",
            "import_dataset",
            "score_metric",
            "make_table3",
            "write_protobias_records",
            "build_item_view",
            "all",
        }
    )
    assert targets.path(config, "table3", ext="csv") in targets.final_targets(config)
    assert not any("humblebench" in target for target in targets.final_targets(config))


def test_a_dataset_with_what_only_building_gives_stops_naming_the_key(tiny_config, tmp_path):
    from blindspot.config import ConfigError
    from blindspot.protobias.released import check_released_config

    config = _released_config(tiny_config, tmp_path, "x") | {}
    config["humblebench"]["from_benchmark"] = {"nota_share": 0.3}
    with pytest.raises(ConfigError, match=r"humblebench\.from_benchmark"):
        check_released_config(config)


def _tiny_row(table, label):
    return table[table["Method"] == label].drop(columns="Method").iloc[0]


def test_a_metric_is_the_configs_or_a_plug_in_with_its_model(tiny_config, tmp_path, capsys):
    import copy

    from transformers import CLIPConfig, Qwen2_5_VLConfig

    from blindspot.config import ConfigError
    from blindspot.evaluate.config import metric_entries

    config = copy.deepcopy(tiny_config)
    chosen = metric_entries(config, ["clipscore", "my_pkg.scores:MyScore@tiny-clip"])
    assert chosen["clipscore"] == tiny_config["evaluation"]["metrics"]["clipscore"]
    assert (chosen["myscore"]["plugin"], chosen["myscore"]["model"]) == ("my_pkg.scores:MyScore", "tiny-clip")
    # A model by its folder: its entry derived from its files. A plug-in that declares its model a VLM
    # (`VLMS`) has it checked as one; another reads it itself.
    Qwen2_5_VLConfig().save_pretrained(tmp_path / "my-vlm")
    CLIPConfig().save_pretrained(tmp_path / "my-clip")
    chosen = metric_entries(config, [f"vqa_score@{tmp_path / 'my-vlm'}", f"clip_similarity@{tmp_path / 'my-clip'}"])
    assert (chosen["vqa_score"]["model"], chosen["clip_similarity"]["model"]) == ("my-vlm", "my-clip")
    assert config["models"]["my-vlm"]["backend"] == config["models"]["my-clip"]["backend"] == "transformers"
    assert "models.my-clip derived from" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"^model .*my-clip, .*model type clip.*no backend here runs it with images"):
        metric_entries(copy.deepcopy(tiny_config), [f"vqa_score@{tmp_path / 'my-clip'}"])
    with pytest.raises(ConfigError, match=r"^model org/some-model: its config.json is not in the hub cache"):
        metric_entries(config, ["x.y:Z@org/some-model"])
    with pytest.raises(ConfigError, match=r"^model some-model: not in the config's registry, nor a model's folder"):
        metric_entries(config, ["x.y:Z@some-model"])
    with pytest.raises(ConfigError, match=r"--metric my_pkg.scores:MyScore: name the plug-in.s model"):
        metric_entries(config, ["my_pkg.scores:MyScore"])
    with pytest.raises(ConfigError, match="not a metric of the config"):
        metric_entries(config, ["nosuchmetric"])


@pytest.mark.slow
@pytest.mark.integration
def test_evaluate_protobias_on_the_tiny_export_gives_the_tiny_runs_row(tiny_run, tmp_path):
    from blindspot.cli import main

    work, _ = tiny_run
    tiny = yaml.safe_load((work / "config" / "tiny.yaml").read_text())
    dataset = work / targets.path(tiny, "dataset")
    results = tmp_path / "evaluated"
    main(
        [
            "evaluate",
            "protobias",
            "--dataset",
            str(dataset),
            "--metric",
            "clipscore",
            "--results-dir",
            str(results),
            "--configfile",
            str(work / "config" / "tiny.yaml"),
        ]
    )
    new = pd.read_csv(results / "tables" / "table3_metrics.csv")
    original = pd.read_csv(work / targets.path(tiny, "table3", ext="csv"))
    new_row, original_row = _tiny_row(new, "CLIPScore"), _tiny_row(original, "CLIPScore")
    # A domain without test pairs has no split in the export, so no column here; the full run's is empty.
    assert original_row.drop(new_row.index).isna().all()
    pd.testing.assert_series_equal(new_row, original_row[new_row.index], check_names=False)
    about = json.loads((results / "tables" / "evaluate_protobias.json").read_text())
    assert about["metrics"]["clipscore"]["plugin"] == "clip_similarity"
    assert len(about["dataset_fingerprint"]) == 64


def _tiny_release(work, tiny, folder):
    """The tiny run's questions as a release file (JSON Lines, the official layout), their images the run's."""
    from blindspot import schemas
    from blindspot.humblebench.settings import LETTERS
    from blindspot.io import read_table

    questions = read_table(work / targets.path(tiny, "humble_questions"), schemas.HUMBLE_QUESTIONS)
    release = folder / "release.jsonl"
    release.write_text(
        "".join(
            json.dumps(
                {
                    "question_id": row.question_id,
                    "label": row.label,
                    "type": row.type,
                    "image": str(work / row.image_path),
                    "question": "\n".join(
                        [row.question, *(f"{LETTERS[i]}. {o}" for i, o in enumerate(json.loads(row.options)))]
                    ),
                }
            )
            + "\n"
            for row in questions.itertuples()
        )
    )
    return release


@pytest.mark.slow
@pytest.mark.integration
def test_evaluate_humblebench_on_a_release_of_the_tiny_questions_gives_the_tiny_runs_rows(tiny_run, tmp_path):
    from blindspot.cli import main

    work, _ = tiny_run
    tiny = yaml.safe_load((work / "config" / "tiny.yaml").read_text())
    release = _tiny_release(work, tiny, tmp_path)
    results = tmp_path / "evaluated"
    main(
        [
            "evaluate",
            "humblebench",
            "--release",
            str(release),
            "--vlm",
            "tiny-qwen2.5-vl",
            "--results-dir",
            str(results),
            "--configfile",
            str(work / "config" / "tiny.yaml"),
        ]
    )
    new = pd.read_csv(results / "tables" / "humblebench_metrics.csv")
    original = pd.read_csv(work / targets.path(tiny, "humble_metrics"))
    original = original[original["vlm"] == "tiny-qwen2.5-vl"].reset_index(drop=True)
    pd.testing.assert_frame_equal(new, original)
    assert json.loads((results / "tables" / "evaluate_humblebench.json").read_text())["vlms"]["tiny-qwen2.5-vl"]


@pytest.mark.slow
@pytest.mark.integration
def test_evaluate_humblebench_with_a_vlm_named_by_its_folder_gives_the_rows_of_its_registry_entry(
    tiny_run, tmp_path, capsys
):
    """A fresh checkpoint's folder, no registry entry: the tiny Qwen2.5-VL's weights copied under another name
    answer as the registry's entry of them did in the tiny run (the entry derived from its config.json)."""
    import shutil

    from blindspot.cli import main

    work, _ = tiny_run
    tiny = yaml.safe_load((work / "config" / "tiny.yaml").read_text())
    release = _tiny_release(work, tiny, tmp_path)
    checkpoint = shutil.copytree(work / tiny["resources_dir"] / "models" / "tiny-qwen2.5-vl", tmp_path / "my-vlm")
    results = tmp_path / "evaluated"
    options = ["--release", str(release), "--vlm", str(checkpoint), "--setting", "original"]
    main(
        [
            "evaluate",
            "humblebench",
            *options,
            "--results-dir",
            str(results),
            "--configfile",
            str(work / "config" / "tiny.yaml"),
        ]
    )
    assert "blindspot evaluate: models.my-vlm derived from" in capsys.readouterr().err
    new = pd.read_csv(results / "tables" / "humblebench_metrics.csv")
    original = pd.read_csv(work / targets.path(tiny, "humble_metrics"))
    original = original[(original["vlm"] == "tiny-qwen2.5-vl") & (original["setting"] == "original")]
    pd.testing.assert_frame_equal(new.drop(columns="vlm"), original.drop(columns="vlm").reset_index(drop=True))
    identity = json.loads((results / "tables" / "evaluate_humblebench.json").read_text())["vlms"]["my-vlm"]
    assert (identity["model_id"], len(identity["weights"])) == (str(checkpoint), 64)


def test_a_column_that_is_not_field_equals_column_is_one_line(tmp_path, capsys):
    from blindspot.cli import main

    with pytest.raises(SystemExit):
        main(
            [
                "evaluate",
                "protobias",
                "--dataset",
                str(tmp_path),
                "--metric",
                "clipscore",
                "--column",
                "image_corr",
                "--configfile",
                str(REPO / "config" / "tiny.yaml"),
            ]
        )
    assert capsys.readouterr().err.splitlines()[-1] == "blindspot: error: --column 'image_corr' is not FIELD=COLUMN"
    with pytest.raises(SystemExit):
        main(["evaluate", "humblebench", "--release", str(tmp_path), "--vlm", "tiny-qwen2.5-vl", "--cores", "0"])
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith("argument --cores: '0' is not a number of cores (a whole number, at least 1)")
    )


def _evaluate_error(capsys, *args) -> str:
    from blindspot.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_from_any_folder_the_command_lines_paths_are_that_folders_and_the_configs_the_checkouts(
    tiny_config, tmp_path, monkeypatch, capsys
):
    """The workflow runs in the checkout, where the config's relative paths (taxonomies, templates,
    `results_dir`) start; the files named on the command line are read from where the command runs."""
    from blindspot.evaluate import run as evaluate_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.jsonl").write_text(json.dumps(GOOD_RECORD) + '\n{"question_id": 2, "question": "Wh\n')
    assert _evaluate_error(capsys, "humblebench", "--release", "bad.jsonl", "--vlm", "tiny-qwen2.5-vl") == (
        f"blindspot: error: {tmp_path / 'bad.jsonl'}: line 2 is not JSON (Unterminated string starting at: column 32)"
    )
    grey_image(tmp_path / "pixel.png", 128)
    (tmp_path / "release.jsonl").write_text(json.dumps(GOOD_RECORD) + "\n")
    ran = []

    def run_workflow(configfile, profile, cores):  # where the real one starts snakemake: its PYTHONPATH's folder
        ran.append((configfile, profile, Path.cwd()))

    monkeypatch.setattr(evaluate_run, "run_workflow", run_workflow)
    monkeypatch.setattr(evaluate_run, "result_table", lambda config, benchmark: pd.DataFrame({"vlm": []}))
    (tmp_path / "mine.yaml").write_text((REPO / "config" / "tiny.yaml").read_text())  # a copy: the checkout's paths
    (tmp_path / "myprofile").mkdir()
    for configfile, profile, used in (
        (None, "myprofile", tmp_path / "myprofile"),
        ("mine.yaml", "profiles/local", REPO / "profiles" / "local"),
    ):
        evaluate_run.evaluate(
            "humblebench",
            configfile=configfile,
            results_dir="out",
            release="release.jsonl",
            vlms=["tiny-qwen2.5-vl"],
            profile=profile,
        )
        assert ran.pop() == (tmp_path / "out" / "evaluate_config.yaml", str(used), tmp_path)
        written = yaml.safe_load((tmp_path / "out" / "evaluate_config.yaml").read_text())
        assert written["results_dir"] == str(tmp_path / "out")
        assert written["humblebench"]["release"] == str(tmp_path / "release.jsonl")
        # The config's taxonomies are the checkout's, named absolute: the workflow runs in the results folder.
        assert written["domains"] == {
            domain: entry | {"taxonomy": str(REPO / entry["taxonomy"])}
            for domain, entry in tiny_config["domains"].items()
        }
    # A name that is neither here nor a hub id is not looked for in the checkout.
    assert _evaluate_error(capsys, "humblebench", "--release", "nowhere.jsonl", "--vlm", "tiny-qwen2.5-vl") == (
        f"blindspot: error: --release nowhere.jsonl: no such file or folder in {tmp_path}"
    )
    assert _evaluate_error(
        capsys, "humblebench", "--release", "release.jsonl", "--vlm", "tiny-qwen2.5-vl", "--results-dir", "pixel.png"
    ) == (f"blindspot: error: --results-dir {tmp_path / 'pixel.png'}: not a folder")


def test_compared_rows_come_first_and_a_compare_file_that_is_no_csv_stops_before_the_run(tmp_path, monkeypatch, capsys):
    from blindspot.evaluate import run as evaluate_run

    monkeypatch.chdir(tmp_path)
    grey_image(tmp_path / "pixel.png", 128)
    (tmp_path / "release.jsonl").write_text(json.dumps(GOOD_RECORD) + "\n")
    ran = []
    monkeypatch.setattr(evaluate_run, "run_workflow", lambda configfile, profile, cores: ran.append(configfile))
    new_rows = pd.DataFrame({"vlm": ["tiny-qwen2.5-vl"], "accuracy": [0.5]})
    monkeypatch.setattr(evaluate_run, "result_table", lambda config, benchmark: new_rows)
    pd.DataFrame({"vlm": ["last-week"], "accuracy": [0.25]}).to_csv(tmp_path / "before.csv", index=False)
    (tmp_path / "no-vlm.csv").write_text("model,accuracy\nx,0.1\n")
    args = [
        "humblebench",
        "--release",
        "release.jsonl",
        "--vlm",
        "tiny-qwen2.5-vl",
        "--results-dir",
        "out",
        "--configfile",
        str(REPO / "config" / "tiny.yaml"),
    ]
    for compare, problem in (
        (".", f"{tmp_path}: Is a directory"),
        ("pixel.png", f"--compare {tmp_path / 'pixel.png'}: not UTF-8 text"),
    ):
        assert _evaluate_error(capsys, *args, "--compare", compare).startswith(f"blindspot: error: {problem}")
    (tmp_path / "no-label.jsonl").write_text(json.dumps({"question_id": "q1", "question": "?"}) + "\n")
    assert _evaluate_error(capsys, "humblebench", "--release", "no-label.jsonl", *args[3:]) == (
        f"blindspot: error: release {tmp_path / 'no-label.jsonl'}, question q1: lacks ['image', 'label', 'type']"
    )
    assert ran == []
    rows = evaluate_run.evaluate(
        "humblebench",
        configfile=str(REPO / "config" / "tiny.yaml"),
        results_dir="out",
        release="release.jsonl",
        vlms=["tiny-qwen2.5-vl"],
        compare=["before.csv"],
    )
    assert rows[["vlm", "accuracy", "row"]].to_dict("records") == [
        {"vlm": "last-week", "accuracy": 0.25, "row": "compared: before.csv"},
        {"vlm": "tiny-qwen2.5-vl", "accuracy": 0.5, "row": "new"},
    ]
    assert _evaluate_error(capsys, *args, "--compare", "no-vlm.csv") == (
        f"blindspot: error: --compare {tmp_path / 'no-vlm.csv'}: no column 'vlm' (a CSV with the table's columns)"
    )


def test_a_dataset_or_release_that_cannot_be_read_is_named_with_what_it_is(tmp_path, capsys):
    config = ["--configfile", str(REPO / "config" / "tiny.yaml"), "--results-dir", str(tmp_path / "out")]
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("neutral_prompt\timage_corr\timage_adv\n")
    assert _evaluate_error(capsys, "protobias", "--dataset", str(tsv), "--metric", "clipscore", *config) == (
        f"blindspot: error: dataset {tsv}: a file must be .jsonl, .json, .parquet or .csv"
    )
    empty = tmp_path / "pairs.csv"
    empty.write_text("")
    assert _evaluate_error(capsys, "protobias", "--dataset", str(empty), "--metric", "clipscore", *config) == (
        f"blindspot: error: dataset {empty}: an empty file, not a CSV with a header row"
    )
    listed = tmp_path / "pairs.json"
    listed.write_text(json.dumps({"pairs": []}))
    assert _evaluate_error(capsys, "protobias", "--dataset", str(listed), "--metric", "clipscore", *config) == (
        f"blindspot: error: {listed}: not a list of pairs (JSON objects)"
    )
    vlm = ["--vlm", "tiny-qwen2.5-vl"]
    assert _evaluate_error(capsys, "humblebench", "--release", str(tsv), *vlm, *config) == (
        f"blindspot: error: release {tsv}: a file must be .jsonl, .json or .parquet"
    )
    # Read before the workflow starts: a bad line after good ones stops here, naming it.
    release = tmp_path / "release.jsonl"
    release.write_text(json.dumps(GOOD_RECORD) + '\n{"question_id": 2, "question": "Wh\n')
    assert _evaluate_error(capsys, "humblebench", "--release", str(release), *vlm, *config) == (
        f"blindspot: error: {release}: line 2 is not JSON (Unterminated string starting at: column 32)"
    )
    assert not (tmp_path / "out" / "evaluate_config.yaml").exists()


def test_the_vlm_help_says_a_registry_name_a_folder_or_a_hub_id(capsys):
    from blindspot.cli import main

    with pytest.raises(SystemExit):
        main(["evaluate", "humblebench", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert (
        "--vlm VLM a model: its name in the config's registry (models:), its folder or its hub id (its entry then "
        "derived from its config.json and printed)"
    ) in help_text
