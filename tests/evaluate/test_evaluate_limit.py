"""`--limit N` (`dataset.limit`, `humblebench.limit`): one fixed, stratified sample of a benchmark's items
(`blindspot.sampling`), the same for everyone, and every table, row and provenance made from it saying so."""

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.images import grey_image
from helpers.workflow import REPO
from PIL import Image

from blindspot import targets
from blindspot.sampling import marked_caption, marked_table, sample_label, stratified_sample

LETTERED = "What is it?\nA. a cat\nB. a dog\nC. a cup\nD. a bag\nE. None of the above"


def _items(sizes: dict[str, int]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"id": f"{stratum}-{i}", "kind": stratum} for stratum, size in sizes.items() for i in range(size)]
    )


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- the sampler -----------------------------------------------------------------------------------------------


def test_the_sample_is_the_same_rows_whatever_the_order_of_the_input_and_keeps_that_order():
    items = _items({"a": 40, "b": 25, "c": 10})
    sample = stratified_sample(items, ["kind"], "id", 12)
    for seed in range(5):
        shuffled = items.sample(frac=1, random_state=seed).reset_index(drop=True)
        again = stratified_sample(shuffled, ["kind"], "id", 12)
        assert sorted(again["id"]) == sorted(sample["id"])
        assert list(again["id"]) == [i for i in shuffled["id"] if i in set(sample["id"])]  # the input's order
    # within a stratum the rows with the lowest sha256 of their id come first
    for kind, part in sample.groupby("kind"):
        ranked = sorted(items.loc[items["kind"] == kind, "id"], key=_sha)
        assert sorted(part["id"], key=_sha) == ranked[: len(part)]


def test_each_stratum_gets_a_share_in_proportion_to_its_size():
    sample = stratified_sample(_items({"a": 60, "b": 30, "c": 10}), ["kind"], "id", 10)
    assert sample["kind"].value_counts().to_dict() == {"a": 6, "b": 3, "c": 1}
    # largest remainder: 7 of (50, 30, 20) is 3.5, 2.1, 1.4 -> 3, 2, 1, and the row left goes to the .5
    sample = stratified_sample(_items({"a": 50, "b": 30, "c": 20}), ["kind"], "id", 7)
    assert sample["kind"].value_counts().to_dict() == {"a": 4, "b": 2, "c": 1}


def test_every_stratum_is_present_when_the_limit_allows_and_strata_are_column_combinations():
    items = _items({"big": 97, "x": 1, "y": 1, "z": 1})
    assert set(stratified_sample(items, ["kind"], "id", 4)["kind"]) == {"big", "x", "y", "z"}
    assert len(stratified_sample(items, ["kind"], "id", 2)) == 2  # fewer rows than strata: the largest shares
    two = pd.DataFrame(
        {
            "id": [f"q{i}" for i in range(12)],
            "type": ["Object", "Relation"] * 6,
            "nota": [i % 3 == 0 for i in range(12)],
        }
    )
    drawn = stratified_sample(two, ["type", "nota"], "id", 4)
    assert set(zip(drawn["type"], drawn["nota"], strict=True)) == {
        (t, n) for t in ("Object", "Relation") for n in (True, False)
    }


def test_a_limit_at_or_above_the_items_is_every_item_and_no_sample():
    items = _items({"a": 3, "b": 2})
    for limit in (None, 5, 50):
        assert stratified_sample(items, ["kind"], "id", limit) is items
    assert sample_label({"limit": 50, "sampled": 5, "total": 5}, "pairs") is None
    assert sample_label(None, "pairs") is None
    table = pd.DataFrame({"Method": ["CLIPScore"], "Overall Acc.": [0.5]})
    assert marked_caption("Table 3: ...", None) == "Table 3: ..."
    assert marked_table(table, None) is table


def test_a_sampled_tables_csv_rows_and_captions_say_so(tmp_path):
    from blindspot.protobias.table3 import write_table3
    from blindspot.reporting import write_report_table

    label = sample_label({"limit": 3, "sampled": 3, "total": 6}, "pairs")
    assert label == "3 of 6 pairs"
    table = pd.DataFrame({"Method": ["CLIPScore", "HPSv2"], "Overall Acc.": [0.5, 1.0]})
    for write in (write_table3, write_report_table):
        files = [tmp_path / f"{write.__name__}.{ext}" for ext in ("csv", "md", "tex")]
        write(table, *files, caption="Table 3: pairwise accuracy", sample=label)
        assert list(pd.read_csv(files[0])["sample"]) == ["3 of 6 pairs"] * 2
        assert files[1].read_text().startswith("[A sample: 3 of 6 pairs, not the whole benchmark] Table 3:")
        assert r"\caption{[A sample: 3 of 6 pairs, not the whole benchmark] Table 3" in files[2].read_text()
        assert "sample" not in files[1].read_text().split("\n\n", 1)[1]  # the Markdown table itself as it was


# --- HumbleBench: type and NOTA --------------------------------------------------------------------------------


def _release(folder: Path, reverse: bool = False) -> str:
    """Six questions: three Object (two with NOTA the answer), two Attribute (one), one Relation."""
    Image.new("RGB", (8, 8), "red").save(folder / "img.png")
    kinds = [
        ("Object", "E"),
        ("Object", "E"),
        ("Object", "A"),
        ("Attribute", "E"),
        ("Attribute", "B"),
        ("Relation", "C"),
    ]
    records = [
        {"question_id": f"q{i}", "question": LETTERED, "type": kind, "label": label, "image": "img.png"}
        for i, (kind, label) in enumerate(kinds)
    ]
    path = folder / ("reversed.jsonl" if reverse else "release.jsonl")
    path.write_text("".join(json.dumps(record) + "\n" for record in (records[::-1] if reverse else records)))
    return str(path)


def test_humblebench_questions_are_sampled_by_type_and_nota_the_same_in_any_order(tmp_path):
    from blindspot.humblebench.sources import collect_questions

    frame, counters = collect_questions(_release(tmp_path), tmp_path / "images", None, {}, None, 7, None, None, 5)
    assert counters["sample"] == {"limit": 5, "sampled": 5, "total": 6}
    assert counters["questions"] == 5
    assert counters["release"] == 6
    # five strata (Object and Attribute, each with NOTA the answer or not; Relation) for five rows: one each,
    # and of the two Object questions with NOTA the answer, the one whose id has the lower sha256
    strata = set(zip(frame["type"], frame["label"] == "E", strict=True))
    assert strata == {
        ("Object", True),
        ("Object", False),
        ("Attribute", True),
        ("Attribute", False),
        ("Relation", False),
    }
    assert set(frame["question_id"]) == {"q2", "q3", "q4", "q5", min("q0", "q1", key=_sha)}
    again, _ = collect_questions(
        _release(tmp_path, reverse=True), tmp_path / "images", None, {}, None, 7, None, None, 5
    )
    assert sorted(again["question_id"]) == sorted(frame["question_id"])
    whole, counters = collect_questions(_release(tmp_path), tmp_path / "images", None, {}, None, 7, None, None, None)
    assert len(whole) == 6
    assert counters["sample"] == {"limit": None, "sampled": 6, "total": 6}


# --- the config: the limit reaches the rules ----------------------------------------------------------------


def _evaluated_config(dataset: str, results: Path, limit: int | None) -> dict:
    """What `blindspot evaluate protobias` writes, with HumbleBench's release beside it, as a user may."""
    from blindspot.checks import validate_config
    from blindspot.dag import checkout_config
    from blindspot.evaluate.config import DEFAULT_CONFIG, protobias_config

    config = protobias_config(checkout_config(None, DEFAULT_CONFIG), dataset, ["clipscore"], {}, str(results), limit)
    config["humblebench"] |= {"release": _release(results.parent), "limit": limit and limit + 1}
    validate_config(config)
    return config


@pytest.mark.integration
def test_the_limit_reaches_the_rules_that_sample_and_the_tables_read_the_sample(exported, tmp_path):
    from blindspot.dag import job_arguments

    dataset = str(exported[1])
    config = _evaluated_config(dataset, tmp_path / "results", 2)
    # 6 test pairs, 2 in each of 3 domains: 2 pairs leave one domain out, and each domain's seeds are its sample's
    assert config["dataset"]["limit"] == 2
    assert {name: entry["n_seeds"] for name, entry in config["domains"].items()} == {"animals": 1, "demography": 1}
    assert job_arguments(config, "import_dataset", {})["limit"] == 2
    assert job_arguments(config, "make_humble_questions", {})["limit"] == 3
    assert job_arguments(config, "make_table3", {})["sample"] == [targets.path(config, "imported_counters")]
    assert job_arguments(config, "make_humble_tables", {})["sample"] == [
        targets.path(config, "humble_question_counters")
    ]
    whole = _evaluated_config(dataset, tmp_path / "results", None)
    assert len(whole["domains"]) == 3
    assert whole["dataset"]["limit"] is None
    assert job_arguments(whole, "make_table3", {})["sample"] == []


def test_limit_is_a_whole_number_and_reaches_the_config_evaluate_writes(tmp_path, monkeypatch, capsys):
    from blindspot.cli import main
    from blindspot.evaluate import run as evaluate_run

    for bad in ("0", "two", "-1"):
        with pytest.raises(SystemExit):
            main(["evaluate", "humblebench", "--release", "r.jsonl", "--vlm", "tiny-qwen2.5-vl", "--limit", bad])
        assert (
            capsys.readouterr()
            .err.splitlines()[-1]
            .endswith(f"argument --limit: {bad!r} is not a number of questions (a whole number, at least 1)")
        )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(evaluate_run, "run_workflow", lambda configfile, profile, cores: None)
    monkeypatch.setattr(evaluate_run, "result_table", lambda config, benchmark: pd.DataFrame({"vlm": ["v"]}))
    grey_image(tmp_path / "img.png", 128)
    main(
        [
            "evaluate",
            "humblebench",
            "--release",
            _release(tmp_path),
            "--vlm",
            "tiny-qwen2.5-vl",
            "--limit",
            "2",
            "--results-dir",
            "out",
            "--configfile",
            str(REPO / "config" / "tiny.yaml"),
        ]
    )
    written = yaml.safe_load((tmp_path / "out" / "evaluate_config.yaml").read_text())
    assert written["humblebench"]["limit"] == 2


# --- end to end ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.browser
def test_evaluate_protobias_with_a_limit_scores_only_the_sample_and_every_table_says_so(exported, tmp_path, capsys):
    from blindspot import schemas
    from blindspot.cli import main
    from blindspot.io import read_table

    benchmark, dataset = exported
    test = benchmark[benchmark["split"] == "test"]
    # one pair per domain (3 domains, 2 test pairs each): the one whose id has the lowest sha256
    expected = sorted(min(part["pair_id"], key=_sha) for _, part in test.groupby("domain"))
    results = tmp_path / "evaluated"
    full_row = tmp_path / "full.csv"
    pd.DataFrame({"Method": ["CLIPScore"], "sample": ["all"]}).to_csv(full_row, index=False)
    main(
        [
            "evaluate",
            "protobias",
            "--dataset",
            str(dataset),
            "--metric",
            "clipscore",
            "--limit",
            "3",
            "--results-dir",
            str(results),
            "--compare",
            str(full_row),
        ]
    )
    printed = capsys.readouterr().out
    config = yaml.safe_load((results / "evaluate_config.yaml").read_text())
    scored = [read_table(path, schemas.METRIC_SCORES) for path in targets.metric_score_targets(config)]
    assert sorted(pd.concat(scored)["pair_id"]) == expected
    label = f"3 of {len(test)} pairs"
    table3 = pd.read_csv(targets.path(config, "table3", ext="csv"))
    assert set(table3["sample"]) == {label}
    marker = f"[A sample: {label}, not the whole benchmark]"
    assert Path(targets.path(config, "table3", ext="md")).read_text().startswith(marker)
    assert marker in Path(targets.path(config, "table3", ext="tex")).read_text()
    rows = pd.read_csv(results / "tables" / "evaluate_protobias.csv")
    assert set(rows["sample"]) == {label}
    about = json.loads((results / "tables" / "evaluate_protobias.json").read_text())
    assert about["sample"] == {"limit": 3, "sampled": 3, "total": len(test)}
    # the compared full row and the sampled rows, told apart in the printed table
    compared = next(line for line in printed.splitlines() if "compared: full.csv" in line)
    assert "| all " in compared
    assert sum(label in line for line in printed.splitlines()) == len(table3)
    # the evaluate run's items, seen: `blindspot view` on its results folder, opened from disk in Chromium
    from helpers.workflow import CHROMIUM
    from playwright.sync_api import sync_playwright

    assert main(["view", str(results), "--out", str(tmp_path / "site")]) == 0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto((tmp_path / "site" / "index.html").as_uri())
        assert page.inner_text("#count") == f"{len(expected)} pairs"
        assert page.eval_on_selector_all(
            ".item img", "imgs => imgs.length && imgs.every(i => i.complete && i.naturalWidth)"
        )
        browser.close()


@pytest.mark.slow
@pytest.mark.integration
def test_evaluate_humblebench_with_a_limit_answers_only_the_sample_and_every_table_says_so(tmp_path):
    from blindspot import schemas
    from blindspot.evaluate.run import evaluate
    from blindspot.io import read_table

    results = tmp_path / "evaluated"
    rows = evaluate(
        "humblebench",
        release=_release(tmp_path),
        vlms=["tiny-qwen2.5-vl"],
        limit=2,
        settings=["original", "nota_only"],
        results_dir=str(results),
    )
    config = yaml.safe_load((results / "evaluate_config.yaml").read_text())
    # two of five strata: the largest (Object, NOTA the answer: q0 and q1) first, its lower sha256
    asked = set(read_table(targets.path(config, "humble_questions"), schemas.HUMBLE_QUESTIONS)["question_id"])
    assert len(asked) == 2
    assert min("q0", "q1", key=_sha) in asked
    answered = [read_table(path, schemas.HUMBLE_ANSWERS) for path in targets.humble_answer_targets(config)]
    assert set(pd.concat(answered)["question_id"]) == asked
    label, marker = "2 of 6 questions", "[A sample: 2 of 6 questions, not the whole benchmark]"
    assert set(rows["sample"]) == {label}
    assert set(pd.read_csv(targets.path(config, "humble_metrics"))["sample"]) == {label}
    for table in ("table4", "table5", "table6"):
        assert set(pd.read_csv(targets.path(config, table, ext="csv"))["sample"]) == {label}
        assert Path(targets.path(config, table, ext="md")).read_text().startswith(marker)
    about = json.loads((results / "tables" / "evaluate_humblebench.json").read_text())
    assert about["sample"] == {"limit": 2, "sampled": 2, "total": 6}
