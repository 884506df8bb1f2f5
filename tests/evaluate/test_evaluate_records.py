"""Per-item records: each scored ProtoBias pair and each HumbleBench answer as a JSON line, their decisions
the metrics' own, and `blindspot evaluate --show` / `blindspot.api.read_records`, which list them failures first."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.workflow import REPO

import blindspot.api
from blindspot import schemas, targets
from blindspot.config import ConfigError
from blindspot.docs import OUTPUT_DESCRIPTIONS
from blindspot.evaluate.records import read_records
from blindspot.humblebench.humility import humility_metrics, with_todays_reading
from blindspot.humblebench.parsing import PARSER_VERSION
from blindspot.humblebench.records import answer_records
from blindspot.io import write_table
from blindspot.protobias.accuracy import accuracy_breakdown, pairwise_outcomes
from blindspot.protobias.records import pair_records

# --- ProtoBias ---------------------------------------------------------------------------------------------------


def benchmark_pairs() -> pd.DataFrame:
    """Five test pairs and one train pair, in the benchmark pairs' columns."""
    rows = []
    for pair_id, split, knob in (
        ("p1", "test", "count"),
        ("p2", "test", "colour"),
        ("p3", "test", "count"),
        ("p4", "test", None),
        ("p5", "test", "scale"),
        ("p0", "train", "count"),
    ):
        row = dict.fromkeys(schemas.BENCHMARK_PAIRS.names, "")
        rows.append(
            row
            | {
                "pair_id": pair_id,
                "split": split,
                "knob": knob,
                "domain": "animals",
                "seed": 1,
                "min_corr_score": 9.0,
                "min_adv_score": 9.0,
                "corr_path": f"/img/{pair_id}_corr.png",
                "adv_path": f"/img/{pair_id}_adv.png",
            }
        )
    return pd.DataFrame(rows, columns=schemas.BENCHMARK_PAIRS.names)


def metric_scores() -> pd.DataFrame:
    """clip: right on p1, a tie on p2, wrong on p3 (by 0.6) and p5 (by 0.1), no score for p4, and a train
    pair's score; pick: right on every test pair."""
    clip = {
        "p1": (0.9, 0.1),
        "p2": (0.5, 0.5),
        "p3": (0.2, 0.8),
        "p4": (np.nan, 0.3),
        "p5": (0.4, 0.5),
        "p0": (0.9, 0.1),
    }
    pick = {f"p{i}": (1.0, 0.0) for i in range(1, 6)}
    return pd.DataFrame(
        [
            {
                "pair_id": pair,
                "domain": "animals",
                "metric": metric,
                "model_id": f"org/{metric}",
                "model_revision": "r",
                "prompt": f"a bird {pair}",
                "corr_raw": c * 10,
                "adv_raw": a * 10,
                "corr_score": c,
                "adv_score": a,
                "corr_detail": "",
                "adv_detail": "no answer" if np.isnan(c) else "",
            }
            for metric, values in (("clip", clip), ("pick", pick))
            for pair, (c, a) in values.items()
        ],
        columns=schemas.METRIC_SCORES.names,
    )


def test_a_pair_record_s_decision_is_table3_s():
    scores, pairs = metric_scores(), benchmark_pairs()
    records = pair_records(scores, pairs)
    assert len(records) == 10  # the train pair's score is no item of the evaluation
    assert list(records.columns) == schemas.PROTOBIAS_RECORDS.names
    correct, _ = pairwise_outcomes(scores, pairs, ["clip", "pick"])
    for metric in ("clip", "pick"):
        mine = records[records["metric"] == metric].set_index("pair_id")
        assert mine["correct"].to_dict() == correct[metric].to_dict()
        overall = accuracy_breakdown(scores, pairs, [metric], n_boot=10).query("breakdown == 'overall'")
        assert mine["correct"].mean() == overall["accuracy"].item()
    clip = records[records["metric"] == "clip"].set_index("pair_id")
    assert clip["outcome"].to_dict() == {"p1": "right", "p2": "wrong", "p3": "wrong", "p4": "unscored", "p5": "wrong"}
    assert clip.loc["p3", "margin"] == pytest.approx(-0.6)
    assert (clip.loc["p1", "corr_image"], clip.loc["p1", "adv_image"]) == ("/img/p1_corr.png", "/img/p1_adv.png")
    assert clip.loc["p4", "adv_detail"] == "no answer"
    assert pd.isna(clip.loc["p4", "knob"])  # a dataset without knobs
    stray = pd.concat([scores, scores.head(1).assign(pair_id="zz")])
    with pytest.raises(ValueError, match="pair zz is not a benchmark pair"):
        pair_records(stray, pairs)


@pytest.fixture
def protobias_file(tmp_path):
    """The records file the workflow's step writes from the score shards and the benchmark pairs."""
    from blindspot.steps.table3 import write_protobias_records

    shards = []
    for metric, part in metric_scores().groupby("metric"):
        shards.append(str(tmp_path / f"{metric}.parquet"))
        write_table(shards[-1], part, schemas.METRIC_SCORES)
    write_table(tmp_path / "pairs.parquet", benchmark_pairs(), schemas.BENCHMARK_PAIRS)
    out = tmp_path / "protobias_records.jsonl"
    write_protobias_records(scores=shards, benchmark=str(tmp_path / "pairs.parquet"), out=str(out))
    return out


def test_the_written_records_are_json_lines_that_read_back_failures_first(protobias_file):
    lines = protobias_file.read_text().splitlines()
    assert len(lines) == 10
    first = json.loads(lines[0])
    assert list(first) == schemas.PROTOBIAS_RECORDS.names
    assert json.loads(lines[3])["corr_raw"] is None  # clip's p4: NaN is null, the file strict JSON
    records = read_records(protobias_file)
    assert records.attrs["benchmark"] == "protobias"
    # clip's failures, the worst first and the unscored last among them, then the right ones, narrowest first
    assert list(zip(records["metric"], records["pair_id"], strict=True))[:4] == [
        ("clip", "p3"),
        ("clip", "p5"),
        ("clip", "p2"),
        ("clip", "p4"),
    ]
    assert not records["correct"].head(4).any()
    assert records["correct"].tail(6).all()
    assert records["margin"].tail(6).is_monotonic_increasing
    assert blindspot.api.read_records(protobias_file).equals(records)


def _show(capsys, *args) -> list[str]:
    """What `blindspot evaluate --show` prints, by line."""
    from blindspot.cli import main

    assert main(["evaluate", "--show", *map(str, args)]) == 0
    return capsys.readouterr().out.splitlines()


def test_show_counts_the_failures_and_lists_them_first(protobias_file, capsys):
    lines = _show(capsys, protobias_file)
    # with accuracy and its interval resampling neutral prompts (triplets): pick is right on every pair
    assert lines[0].startswith("clip: 4 of 5 pairs failed (1 unscored); accuracy 0.200 [0.000, ")
    assert lines[0].endswith("], resampling prompts")
    assert lines[1] == "pick: 0 of 5 pairs failed; accuracy 1.000 [1.000, 1.000], resampling prompts"
    rows = [line for line in lines if line.startswith("| ")][1:]
    assert [row.split("|")[1].strip() for row in rows] == ["wrong"] * 3 + ["unscored"] + ["right"] * 6
    assert "p3" in rows[0]
    assert "-0.6" in rows[0]
    lines = _show(capsys, protobias_file, "--failures", "--rows", "2")
    assert lines[2] == "the first 2 of 4 rows (--rows N shows N, --rows 0 all)"
    rows = [line for line in lines if line.startswith("| ")][1:]
    assert len(rows) == 2
    assert [row.split("|")[1].strip() for row in rows] == ["wrong", "wrong"]


# --- HumbleBench -------------------------------------------------------------------------------------------------

FIVE = json.dumps(["a cat", "a dog", "a bird", "a fish", "None of the above"])
FIVE_SHOWN = json.dumps({letter: letter for letter in "ABCDE"})
# The official NOTA-only: the correct option (A) removed, the others keep their letters.
GAP = json.dumps(["a dog", "a bird", "a fish", "None of the above"])
GAP_SHOWN = json.dumps({"A": "", "B": "B", "C": "C", "D": "D", "E": "E"})


def questions() -> pd.DataFrame:
    rows = [
        {
            "question_id": q,
            "source": "release",
            "question": f"What is in {q}?",
            "options": FIVE,
            "label": "A",
            "type": "Object",
            "image_path": f"/img/{q}.png",
            "origin": "{}",
            "verified": True,
        }
        for q in ("q1", "q2")
    ]
    return pd.DataFrame(rows, columns=schemas.HUMBLE_QUESTIONS.names)


def humble_answers() -> pd.DataFrame:
    """One VLM: in the original setting q1 right, q2 wrong by its text (A by its letters); in NOTA-only q1
    unreadable by its text (two letters) and right by its letters, q2 wrong by its text and unreadable by its
    letters ("A": not shown there)."""
    probabilities = json.dumps([0.6, 0.1, 0.1, 0.1, 0.1])
    rows = []
    for setting, question, text, logits, options, shown in (
        ("original", "q1", "A", "A", FIVE, FIVE_SHOWN),
        ("original", "q2", "The answer is B.", "A", FIVE, FIVE_SHOWN),
        ("nota_only", "q1", "B or C", "E", GAP, GAP_SHOWN),
        ("nota_only", "q2", "C", "A", GAP, GAP_SHOWN),
    ):
        label = "A" if setting == "original" else "E"
        rows.append(
            {
                "question_id": question,
                "vlm": "vlm-a",
                "model_id": "org/vlm-a",
                "model_revision": "",
                "setting": setting,
                "type": "Object",
                "options": options,
                "label": label,
                "nota": "E",
                "letter_map": shown,
                "noise_image": False,
                "letter_probabilities": probabilities if setting == "original" else "[null, null, null, null]",
                "letter_mass": 1.0,
                "prediction_logits": logits,
                "text": text,
                "prediction_text": "Z",
                "reasoning": "",
                "stopped": True,
                "cut_off": False,
                "template_version": "v1",
                "prompt_version": "v1",
                "protocol": "official",
            }
        )
    return pd.DataFrame(rows, columns=schemas.HUMBLE_ANSWERS.names)


@pytest.mark.parametrize("reading", ["text", "logits"])
def test_an_answer_record_is_read_and_judged_as_the_metrics_read_it(reading):
    """The stored `prediction_text` ("Z") is stale: the records, like the tables, read the texts again."""
    answers, _ = with_todays_reading(humble_answers())
    records = answer_records(answers, questions(), reading, {"original": ""}, 5)
    assert list(records.columns) == schemas.HUMBLE_RECORDS.names
    assert set(records["noise"]) == {""}
    assert records["noise_seed"].isna().all()
    shown = answers.assign(noise_image=answers["setting"] == "nota_only")
    noisy = answer_records(shown, questions(), reading, {"nota_only": "per_question"}, 5)
    assert noisy["noise"].tolist() == ["", "", "per_question", "per_question"]
    assert noisy["noise_seed"].tolist()[2:] == [5, 5]
    for setting, part in records.groupby("setting"):
        shown = answers[answers["setting"] == setting]
        overall = humility_metrics(shown.assign(prediction=shown[f"prediction_{reading}"]))["overall"]
        assert part["correct"].mean() == overall
    expected = {"text": ["right", "wrong", "unreadable", "wrong"], "logits": ["right", "right", "right", "unreadable"]}
    assert records["outcome"].tolist() == expected[reading]
    assert records["prediction_text"].tolist() == ["A", "B", "", "C"]
    assert records["prediction"].tolist() == {"text": ["A", "B", "", "C"], "logits": ["A", "A", "E", ""]}[reading]
    assert records.loc[2, "options"] == {"B": "a dog", "C": "a bird", "D": "a fish", "E": "None of the above"}
    assert records.loc[0, "letter_probabilities"] == dict(zip("ABCDE", [0.6, 0.1, 0.1, 0.1, 0.1], strict=True))
    assert records.loc[2, "letter_probabilities"] is None  # an API VLM without letter probabilities
    assert (records.loc[1, "question"], records.loc[1, "image"]) == ("What is in q2?", "/img/q2.png")
    assert set(records["reading"]) == {reading}
    with pytest.raises(ValueError, match="question q2 is not among the questions"):
        answer_records(answers, questions().head(1), reading, {}, 5)


@pytest.fixture
def humble_file(tmp_path):
    from blindspot.steps.humble import write_humble_records

    write_table(tmp_path / "answers.parquet", humble_answers(), schemas.HUMBLE_ANSWERS)
    write_table(tmp_path / "questions.parquet", questions(), schemas.HUMBLE_QUESTIONS)
    out = tmp_path / "humblebench_records.jsonl"
    write_humble_records(
        answers=[str(tmp_path / "answers.parquet")],
        questions=str(tmp_path / "questions.parquet"),
        reading="text",
        parser_version=PARSER_VERSION,
        noise={},
        seed=5,
        out=str(out),
    )
    return out


def test_show_lists_wrong_then_unreadable_then_right_answers(humble_file, capsys):
    records = read_records(humble_file)
    assert records.attrs["benchmark"] == "humblebench"
    assert records["outcome"].tolist() == ["wrong", "wrong", "unreadable", "right"]
    assert list(zip(records["setting"], records["question_id"], strict=True))[:2] == [
        ("original", "q2"),
        ("nota_only", "q2"),
    ]
    lines = _show(capsys, humble_file, "--failures")
    assert lines[:2] == [
        # and each letter's share, as the official Proportions: a position bias shows as one letter's excess
        # and the accuracy with its interval resampling images: two images, one right, give every share
        "vlm-a, original: 1 of 2 answers failed (1 wrong, 0 unreadable); accuracy 0.500 [0.000, 1.000], resampling "
        "images; read as A 50%, B 50%, C 0%, D 0%, E 0%; NOTA 0%, NA 0%",
        "vlm-a, nota_only: 2 of 2 answers failed (1 wrong, 1 unreadable); accuracy 0.000 [0.000, 0.000], resampling "
        "images; read as A 0%, B 0%, C 50%, D 0%, E 0%; NOTA 0%, NA 50%",
    ]
    rows = [line for line in lines if line.startswith("| ")][1:]
    assert [row.split("|")[1].strip() for row in rows] == ["wrong", "wrong", "unreadable"]


# --- refusals ----------------------------------------------------------------------------------------------------


def _error(capsys, *args):
    from blindspot.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", *map(str, args)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()


def test_a_file_that_is_no_records_file_is_one_line_naming_it_and_the_line(protobias_file, tmp_path, capsys):
    good = protobias_file.read_text().splitlines()
    cases = {
        "not_json.jsonl": (
            good[0] + "\n{oops\n",
            "line 2 is not JSON (Expecting property name enclosed in double quotes: column 2)",
        ),
        "answers.jsonl": ('{"question_id": "q1", "prediction": "A"}\n', "line 1 lacks the field(s) vlm, setting, type"),
        "mixed.jsonl": (good[0] + "\n" + json.dumps({"metric": "clip"}) + "\n", "line 2 lacks the field(s) pair_id"),
        "typed.jsonl": (
            json.dumps(json.loads(good[0]) | {"correct": "yes"}) + "\n",
            "line 1 field correct holds 'yes', not a boolean",
        ),
        "nulled.jsonl": (
            json.dumps(json.loads(good[0]) | {"prompt": None}) + "\n",
            "line 1 field prompt holds None, not a string",
        ),
        "list.jsonl": ("[1, 2]\n", "line 1 is not a JSON object"),
        "empty.jsonl": ("\n", "no records (an empty file)"),
    }
    for name, (text, problem) in cases.items():
        (tmp_path / name).write_text(text)
        lines = _error(capsys, "--show", tmp_path / name)
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"blindspot: error: {tmp_path / name}: {problem}"), lines[0]
    with pytest.raises(ConfigError, match="line 2 lacks the field"):
        blindspot.api.read_records(tmp_path / "mixed.jsonl")
    assert _error(capsys, "--show", tmp_path / "nowhere.jsonl") == [
        f"blindspot: error: {tmp_path / 'nowhere.jsonl'}: No such file or directory"
    ]
    assert _error(capsys, "--show", protobias_file, "--rows", "-1")[-1].endswith(
        "argument --rows: '-1' is not a number of rows (a whole number; 0: all)"
    )


def test_a_benchmark_or_show_is_needed_but_not_both(protobias_file, capsys):
    assert _error(capsys) == [
        "blindspot: error: evaluate: name a benchmark to score (protobias, humblebench) or --show FILE, not neither"
    ]
    both = ["--show", protobias_file, "humblebench", "--release", "r.jsonl", "--vlm", "tiny-qwen2.5-vl"]
    assert _error(capsys, *both)[-1].endswith("or --show FILE, not both")


def test_the_records_fields_are_documented_from_their_schemas():
    page = (REPO / "docs" / "outputs.md").read_text()
    for kind, schema in schemas.RECORDS.items():
        assert kind in targets.PATHS
        assert kind in OUTPUT_DESCRIPTIONS
        section = page.split(f"## Records: {kind}\n", 1)[1].split("\n## ", 1)[0]
        for field in schema:
            meaning = field.metadata[b"description"].decode()
            assert meaning
            assert f"| `{field.name}` | {schemas.json_kind(field.type)}" in section
            assert meaning.split("(")[0].strip() in section


# --- end to end --------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.integration
def test_evaluate_writes_a_record_per_scored_pair_whose_decisions_give_table3(exported, built_config, tmp_path, capsys):
    """`blindspot evaluate protobias` with the tiny CLIP on a small export: one record per test pair, whose
    decisions average to Table 3's overall accuracy, and `--show` lists the failures first. The tiny models
    are the session's (`built_config`), so that nothing is built in the checkout's resources folder."""
    from blindspot.cli import main

    pairs, dataset = exported
    tiny = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    base = tiny | {"resources_dir": built_config["resources_dir"]}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    results = tmp_path / "out"
    assert (
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
                str(tmp_path / "base.yaml"),
            ]
        )
        == 0
    )
    path = results / "tables" / "protobias_records.jsonl"
    assert capsys.readouterr().out.splitlines()[-1] == f"per-item records: {path} (blindspot evaluate --show FILE)"
    records = read_records(path)
    test = pairs[pairs["split"] == "test"]
    assert sorted(records["pair_id"]) == sorted(test["pair_id"])
    assert set(records["outcome"]) <= {"right", "wrong"}
    table3 = pd.read_csv(results / "tables" / "table3_metrics.csv").set_index("Method")
    assert records["correct"].mean() == pytest.approx(float(table3.loc["CLIPScore", "Overall Acc."]))
    lines = _show(capsys, path)
    failed = int((~records["correct"]).sum())
    # with the accuracy and its interval, as Table 3's CSV has them for a dataset whose prompts are its triplets
    overall = table3.loc["CLIPScore"]
    assert lines[0].startswith(
        f"clipscore: {failed} of {len(test)} pairs failed; accuracy {overall['Overall Acc.']:.3f} ["
    )
    rows = [line.split("|")[1].strip() for line in lines if line.startswith("| ")][1:]
    assert rows == ["wrong"] * failed + ["right"] * (len(test) - failed)


@pytest.mark.slow
@pytest.mark.integration
def test_evaluate_humblebench_writes_a_record_per_answer_as_the_metrics_read_it(side_by_side, capsys):
    """`blindspot evaluate humblebench` with the tiny Qwen2.5-VL on four questions in three settings (the run
    tests/conftest.py's `side_by_side` makes): one record per question and setting, whose outcomes give the
    metrics' overall accuracy of the config's reading."""
    from helpers.evaluate import EVALUATED_SETTINGS, EVALUATED_TYPES

    results = side_by_side[0]
    base = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    printed = (results.parent / "command.out").read_text().splitlines()
    path = results / "tables" / "humblebench_records.jsonl"
    assert f"per-item records: {path} (blindspot evaluate --show FILE)" in printed
    records = read_records(path)
    settings = EVALUATED_SETTINGS
    assert len(records) == len(EVALUATED_TYPES) * len(settings)
    assert set(records["setting"]) == set(settings)
    assert list(records["outcome"]) == sorted(records["outcome"], key=["wrong", "unreadable", "right"].index)
    reading = base["humblebench"]["reading"]
    assert set(records["reading"]) == {reading}
    metrics = pd.read_csv(results / "tables" / "humblebench_metrics.csv").query("reading == @reading")
    overall = records.groupby("setting")["correct"].mean()
    assert metrics.set_index("setting")["overall"].to_dict() == pytest.approx(overall.to_dict())
    lines = _show(capsys, path, "--failures", "--rows", "0")
    assert len(lines) == len(settings) + 3 + int((~records["correct"]).sum())  # counts, blank, header, rule, rows


# --- comparisons of runs from their records ----------------------------------------------------------------------


def _protobias_run(flipped: tuple[str, ...] = ()) -> pd.DataFrame:
    """The records of a run of clip and pick on the five test pairs, pick's scores swapped on `flipped`; pairs
    p1 and p2 from one triplet, p3 from another, p4 and p5 from a third."""
    scores = metric_scores()
    swap = (scores["metric"] == "pick") & scores["pair_id"].isin(flipped)
    for column in ("raw", "score"):
        corr, adv = scores[f"corr_{column}"].copy(), scores[f"adv_{column}"].copy()
        scores.loc[swap, f"corr_{column}"], scores.loc[swap, f"adv_{column}"] = adv[swap], corr[swap]
    triplets = {"p0": "t0", "p1": "t1", "p2": "t1", "p3": "t2", "p4": "t3", "p5": "t3"}
    pairs = benchmark_pairs().assign(triplet_id=lambda f: f["pair_id"].map(triplets))
    records = pair_records(scores, pairs)
    records.attrs["benchmark"] = "protobias"
    return records


def test_runs_are_compared_item_by_item_from_their_records_resampling_triplets():
    from blindspot.comparisons import paired_comparisons
    from blindspot.evaluate.records import records_comparisons
    from blindspot.io import stable_id

    before = _protobias_run(flipped=("p1", "p2"))
    before = before[before["metric"] == "pick"]  # last week's run of pick alone
    compared = records_comparisons({"": _protobias_run(), "last-week": before}, n_boot=400, seed=3)
    rows = compared.set_index(["a", "b"])
    # pick against last week's pick: both right on p3-p5, only today's on p1 and p2
    assert rows.loc[("pick", "pick (last-week)"), ["n", "a_only", "b_only"]].tolist() == [5, 2, 0]
    assert rows.loc[("pick", "pick (last-week)"), "p_mcnemar"] == pytest.approx(0.5)
    # clip has no score for p4: compared on the four pairs both scored
    assert rows.loc[("clip", "pick"), ["n", "a_only", "b_only"]].tolist() == [4, 0, 3]
    assert rows.loc[("clip", "pick (last-week)"), ["n", "a_only", "b_only"]].tolist() == [4, 1, 2]
    assert rows["p_holm"].tolist() == pytest.approx([0.75, 1.0, 1.0])  # Holm over the three: 0.25, 1.0, 0.5
    # the intervals resample triplets: the same draws as paired_comparisons given each pair's triplet
    correct = pd.DataFrame(
        {
            "clip": [True, False, False, False, False],
            "pick": [True] * 5,
            "pick (last-week)": [False, False, True, True, True],
        },
        index=[f"p{i}" for i in range(1, 6)],
    )
    scored = correct.ne(correct).assign(clip=[True, True, True, False, True], pick=True, **{"pick (last-week)": True})
    rng = np.random.default_rng([3, int(stable_id("compared", ""), 16)])
    expected = paired_comparisons(correct, np.array(["t1", "t1", "t2", "t3", "t3"]), 400, rng, scored)
    assert compared[["difference_low", "difference_high"]].to_numpy() == pytest.approx(
        expected[["difference_low", "difference_high"]].to_numpy()
    )
    humble = answer_records(*with_todays_reading(humble_answers())[:1], questions(), "text", {}, 0)
    humble.attrs["benchmark"] = "humblebench"
    with pytest.raises(ConfigError, match="records of humblebench and protobias cannot be compared"):
        records_comparisons({"": before, "x": humble}, n_boot=10, seed=0)


def test_vlm_runs_are_compared_per_setting_from_their_records():
    from blindspot.evaluate.records import records_comparisons

    answers, _ = with_todays_reading(humble_answers())
    today = answer_records(answers, questions(), "text", {}, 0)
    # last week's vlm-a got q2 right in the original setting
    before = today.copy()
    before.loc[(before["setting"] == "original") & (before["question_id"] == "q2"), ["correct", "outcome"]] = [
        True,
        "right",
    ]
    for frame in (today, before):
        frame.attrs["benchmark"] = "humblebench"
    compared = records_comparisons({"": today, "before": before}, n_boot=50, seed=0).set_index("setting")
    assert set(compared.index) == {"original", "nota_only"}
    assert compared.loc["original", ["a", "b", "n", "a_only", "b_only"]].tolist() == [
        "vlm-a",
        "vlm-a (before)",
        2,
        0,
        1,
    ]
    assert compared.loc["nota_only", ["a_only", "b_only"]].tolist() == [0, 0]


def test_evaluate_compares_a_run_whose_records_lie_beside_its_rows(tmp_path, monkeypatch, capsys):
    """`--compare before/tables/evaluate_humblebench.csv`: its rows are printed beside, and the records its run wrote
    beside them are compared item by item with the new run's; a records file of the other benchmark is refused."""
    from helpers.evaluate import GOOD_RECORD
    from helpers.images import grey_image

    from blindspot.cli import main
    from blindspot.evaluate import run as evaluate_run
    from blindspot.io import write_records

    monkeypatch.chdir(tmp_path)
    grey_image(tmp_path / "pixel.png", 128)
    (tmp_path / "release.jsonl").write_text(json.dumps(GOOD_RECORD) + "\n")
    answers, _ = with_todays_reading(humble_answers())
    today = answer_records(answers, questions(), "text", {}, 0)
    before = today.assign(correct=True, outcome="right")

    def run_workflow(configfile, profile, cores):  # the run writes its records as the workflow's step does
        config = yaml.safe_load(configfile.read_text())
        write_records(targets.path(config, "humble_records"), today, schemas.HUMBLE_RECORDS)

    monkeypatch.setattr(evaluate_run, "run_workflow", run_workflow)
    monkeypatch.setattr(evaluate_run, "result_table", lambda config, benchmark: pd.DataFrame({"vlm": ["vlm-a"]}))
    (tmp_path / "before" / "tables").mkdir(parents=True)
    pd.DataFrame({"vlm": ["vlm-a"]}).to_csv(tmp_path / "before" / "tables" / "evaluate_humblebench.csv", index=False)
    write_records(tmp_path / "before" / "tables" / "humblebench_records.jsonl", before, schemas.HUMBLE_RECORDS)
    args = ["evaluate", "humblebench", "--release", "release.jsonl", "--vlm", "tiny-qwen2.5-vl"]
    args += ["--configfile", str(REPO / "config" / "tiny.yaml"), "--results-dir", "out"]
    main([*args, "--compare", "before/tables/evaluate_humblebench.csv"])
    printed = capsys.readouterr().out
    assert "compared: evaluate_humblebench.csv" in printed  # its rows, beside the new
    compared = pd.read_csv(tmp_path / "out" / "tables" / "evaluate_humblebench_comparisons.csv").set_index("setting")
    # before got every question right; today's vlm-a q2 wrong in both settings, q1 unreadable in NOTA-only
    assert compared.loc["original", ["a", "b", "a_only", "b_only"]].tolist() == ["vlm-a", "vlm-a (before)", 0, 1]
    assert compared.loc["nota_only", ["a_only", "b_only"]].tolist() == [0, 2]
    assert "vlm-a (before)" in printed  # the comparisons' Markdown, printed after the rows
    protobias = tmp_path / "protobias_records.jsonl"
    write_records(protobias, _protobias_run(), schemas.PROTOBIAS_RECORDS)
    with pytest.raises(SystemExit):
        main([*args, "--compare", str(protobias)])
    assert (
        capsys.readouterr().err.strip()
        == f"blindspot: error: --compare {protobias}: protobias records, not humblebench's"
    )
