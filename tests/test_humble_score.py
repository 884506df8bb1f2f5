"""`blindspot humble score`: answers made elsewhere (the official code's prediction files, or a plain
CSV) scored against the release, end to end through the CLI; and the official scorer beside ours on the
same predictions (the numbers in docs/humblebench.md)."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from blindspot.cli import main

CONFIG = str(Path(__file__).resolve().parents[1] / "config" / "config.yaml")
OPTIONS = {
    1: ("Object", "What animal is on the sofa?", ["A cat", "A dog", "A rabbit", "A bird"], "A"),
    2: ("Attribute", "What colour is the car?", ["Red", "Blue", "Green", "White"], "B"),
    3: ("Relation", "Where is the lamp relative to the table?", ["Under it", "Beside it", "On it", "Behind it"], "C"),
    4: ("Object", "What is on the wall?", ["A clock", "A window", "A mirror", "A poster"], "E"),
    5: ("Attribute", "What is the cup made of?", ["Glass", "Paper", "Steel", "Wood"], "E"),
    6: ("Relation", "What is the man holding?", ["A phone", "A book", "A cup", "A bag"], "D"),
}
# The release writes "A. text" or, in some questions, "A.text".
SEPARATOR = {5: "."}
# One model's raw answers per official setting folder.
PREDICTIONS = {
    "common": {1: "A", 2: "B. Blue", 3: "C, the lamp stands on a table.", 4: "E", 5: "E. None of the above", 6: "(E)"},
    "noise_image": {1: "E", 2: "e", 3: "None of the above", 4: "A", 5: "E", 6: "I cannot tell."},
    "nota_only": {1: "A", 2: "E", 3: "D", 4: "E", 5: "E", 6: "E."},
}


def question_text(question_id: int, removed: str = "") -> str:
    """The question as the official code shows it: the options written into it, the removed one left
    out (its letters keep their gap)."""
    _, stem, options, _ = OPTIONS[question_id]
    separator = SEPARATOR.get(question_id, ". ")
    texts = [*options, "None of the above"]
    lines = [f"{letter}{separator}{text}" for letter, text in zip("ABCDE", texts, strict=True)]
    return "\n".join([stem, *(line for line in lines if not line.startswith(removed or "-"))])


@pytest.fixture
def release(tmp_path):
    path = tmp_path / "release.jsonl"
    records = [
        {"question_id": qid, "question": question_text(qid), "type": kind, "label": label, "image": f"{qid}.jpg"}
        for qid, (kind, _, _, label) in OPTIONS.items()
    ]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def official_line(question_id: int, setting: str, prediction: str) -> dict:
    """One line as the official code writes it (`HumbleBench/utils/entity.py` `DataLoader`, then
    `io.py` `save_results`): NOTA-only removes the correct option and sets the label to E; the noise
    setting swaps the image's path and keeps the original label."""
    kind, _, _, label = OPTIONS[question_id]
    removed = label if setting == "nota_only" and label != "E" else ""
    path = ".cache/noise_image.png" if setting == "noise_image" else f"/data/images/{question_id}.jpg"
    return {
        "label": "E" if removed else label, "question": question_text(question_id, removed), "type": kind,
        "image": {"bytes": None, "path": path}, "question_id": question_id, "prediction": prediction,
    }  # fmt: skip


@pytest.fixture
def official(tmp_path):
    """A results folder in the official layout: results/<setting>/<Model>/<Model>.jsonl."""
    for setting, answers in PREDICTIONS.items():
        path = tmp_path / "results" / setting / "Toy-VL" / "Toy-VL.jsonl"
        path.parent.mkdir(parents=True)
        lines = [json.dumps(official_line(qid, setting, answer), ensure_ascii=False) for qid, answer in answers.items()]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path / "results"


def score(predictions, release, out, *extra):
    return main(["humble", "score", str(predictions), "--questions", str(release), "--out", str(out),
                 "--configfile", CONFIG, *extra])  # fmt: skip


def metrics(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "tables" / "humblebench_metrics.csv").set_index("setting")


# Ours, by hand. Original: correct 1-5 (3 reads "C,"; 5 reads "E. None ..." as E); 6 says NOTA wrongly.
ORIGINAL = {
    "overall": 5 / 6, "object": 1.0, "attribute": 1.0, "relation": 0.5, "non_nota_accuracy": 3 / 4,
    "nota_hit": 1.0, "false_nota": 1 / 4, "humility": (1 + 3 / 4) / 2, "unparseable": 0.0,
    "macro_f1": (1 + 1 + 1 + 0 + 0.8) / 5,  # A, B, C perfect; D missed; E: 2 right, 1 false
    "d_prime": 2 * 0.6744897501960817,  # z(1 - 1/4) - z(1/4): a hit rate of 1 moves half a count in
}  # fmt: skip
# Noise: the labels stay A, B, C, E, E, D (officially and in the paper's Table 5); 1, 2 ("e"), 3 (NOTA's
# text) and 5 say NOTA, 4 says A, 6 names no option: only 5 is right.
NOISE = {"overall": 1 / 6, "nota_hit": 1 / 2, "false_nota": 3 / 4, "nota_selection": 4 / 6, "unparseable": 1 / 6,
         "humility": (1 / 2 + 1 - 3 / 4) / 2}  # fmt: skip
# NOTA-only: 1 names the removed A (not shown: unparseable); 3 says D; the rest say NOTA.
NOTA_ONLY = {"overall": 4 / 6, "nota_hit": 4 / 6, "unparseable": 1 / 6}


def test_official_results_folder_scored_end_to_end(official, release, tmp_path, capsys):
    out = tmp_path / "scored"
    assert score(official, release, out) == 0
    found = metrics(out)
    assert set(found.index) == {"original", "noise", "nota_only"}
    assert set(found["vlm"]) == {"Toy-VL"}
    assert set(found["reading"]) == {"text"}
    for setting, expected in (("original", ORIGINAL), ("noise", NOISE), ("nota_only", NOTA_ONLY)):
        for name, value in expected.items():
            assert found.loc[setting, name] == pytest.approx(value), (setting, name)
    for kind in ("table4_humblebench_original", "table5_humblebench_settings", "table6_humblebench_models"):
        for ext in ("csv", "md", "tex"):
            assert (out / "tables" / f"{kind}.{ext}").stat().st_size > 0
    assert (out / "tables" / "humblebench_nota_tradeoff.png").read_bytes()[:4] == b"\x89PNG"
    table6 = pd.read_csv(out / "tables" / "table6_humblebench_models.csv")
    assert table6.iloc[0].to_dict() == {
        "Model": "Toy-VL", "Original (Overall)": 83.33, "Noise image (NOTA sel.)": 66.67, "NOTA-only (NOTA hit)": 66.67,
    }  # fmt: skip
    printed = capsys.readouterr().out
    assert printed.startswith("Table 4: the Original setting (text reading), %")
    assert "| Toy-VL | 100 | 50 | 100 | 83.330 | 75 | 100 | 25 | 87.500 |" in printed


def test_plain_csv_scores_as_the_official_files(official, release, tmp_path, capsys):
    """The same answers as a `question_id,setting,model,answer` CSV, with official and config setting
    names: the config's settings show each question as the official code did, so the metrics agree."""
    rows = [
        {"question_id": qid, "setting": setting, "model": "Toy-VL", "answer": answer}
        for setting, answers in PREDICTIONS.items()
        for qid, answer in answers.items()
    ]
    frame = pd.DataFrame(rows).replace({"setting": {"noise_image": "noise"}})  # a config name beside official ones
    frame.loc[len(frame)] = {"question_id": 6, "setting": "common", "model": "Other", "answer": ""}
    plain = tmp_path / "answers.csv"
    frame.to_csv(plain, index=False)
    assert score(plain, release, tmp_path / "plain") == 0
    assert "| Other | n/a | 0 | n/a | 0 | 0 | n/a | 0 | n/a |" in capsys.readouterr().out  # Relation only
    assert score(official, release, tmp_path / "official") == 0
    from_csv = pd.read_csv(tmp_path / "plain" / "tables" / "humblebench_metrics.csv")
    from_official = pd.read_csv(tmp_path / "official" / "tables" / "humblebench_metrics.csv")
    pd.testing.assert_frame_equal(from_csv[from_csv["vlm"] == "Toy-VL"].reset_index(drop=True), from_official)
    other = from_csv[from_csv["vlm"] == "Other"].iloc[0]
    assert (other["setting"], other["unparseable"], other["overall"]) == ("original", 1.0, 0.0)


def test_lone_file_takes_its_setting_from_its_path_or_the_option(official, release, tmp_path):
    assert score(official / "nota_only" / "Toy-VL" / "Toy-VL.jsonl", release, tmp_path / "one") == 0
    assert metrics(tmp_path / "one").loc["nota_only", "nota_hit"] == pytest.approx(4 / 6)
    lone = tmp_path / "toy.jsonl"
    lone.write_text((official / "common" / "Toy-VL" / "Toy-VL.jsonl").read_text())
    assert score(lone, release, tmp_path / "two", "--setting", "common") == 0
    assert metrics(tmp_path / "two").loc["original", "humility"] == pytest.approx(ORIGINAL["humility"])
    # The later official code's cautious prompt goes before the question: its lines are not options.
    cautious = [official_line(qid, "common", answer) for qid, answer in PREDICTIONS["common"].items()]
    lone.write_text("".join(json.dumps(line | {"question": f"If unsure, say E.\n\n{line['question']}"}) + "\n"
                            for line in cautious))  # fmt: skip
    assert score(lone, release, tmp_path / "three", "--setting", "cautious_prompt") == 0
    assert metrics(tmp_path / "three").loc["cautious", "humility"] == pytest.approx(ORIGINAL["humility"])


def _error(capsys, *args) -> str:
    with pytest.raises(SystemExit) as exit_:
        score(*args)
    assert exit_.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Traceback" not in message
    return message


def test_bad_predictions_are_one_line_errors(official, release, tmp_path, capsys):
    plain = tmp_path / "answers.csv"
    plain.write_text("question_id,setting,model\n1,common,Toy\n")
    assert "lack columns ['answer']" in _error(capsys, plain, release, tmp_path / "o")
    plain.write_text("question_id,setting,model,answer\n1,sepia,Toy,A\n")
    assert "unknown setting: 'sepia' is not a setting of the config" in _error(capsys, plain, release, tmp_path)
    plain.write_text("question_id,setting,model,answer\n99,common,Toy,A\n")
    assert "row 2: question 99 is not in the release" in _error(capsys, plain, release, tmp_path / "o")
    grounding = official / "forced_grounding_prompt" / "Toy-VL" / "Toy-VL.jsonl"  # official, but no config setting
    grounding.parent.mkdir(parents=True)
    grounding.write_text(json.dumps(official_line(1, "common", "A")) + "\n")
    message = _error(capsys, official, release, tmp_path)
    assert "unknown setting: the official 'forced_grounding_prompt' is none of the paper's settings" in message
    lone = tmp_path / "toy.jsonl"
    lone.write_text(json.dumps({k: v for k, v in official_line(2, "common", "B").items() if k != "prediction"}) + "\n")
    assert "line 1 lacks ['prediction']" in _error(capsys, lone, release, tmp_path, "--setting", "common")
    lone.write_text(json.dumps(official_line(2, "common", "B") | {"label": "C"}) + "\n")
    assert "labelled 'C', but the release's correct option is shown as 'B'" in _error(
        capsys, lone, release, tmp_path, "--setting", "common"
    )
    lone.write_text(json.dumps(official_line(2, "common", "B") | {"question": "What colour?\nA. Red\nB. Pink"}) + "\n")
    assert "shows 1 of the release's 5 options" in _error(capsys, lone, release, tmp_path, "--setting", "common")
    assert "no such file or folder" in _error(capsys, tmp_path / "missing.csv", release, tmp_path)


# The official scorer, as `HumbleBench/utils/metrics.py` (github.com/maifoundations/HumbleBench) reads
# an answer: split into lower-case words; right if the label's word is among them and no other option
# letter is (so the article "a" is option A); the NOTA hit (`E_accuracy`) counts only an answer that
# is exactly "E", over the questions labelled E.
def official_tokenize(text: str) -> set:
    return set(re.findall(r"\b\w+\b", text.lower()))


def official_is_prediction_correct(prediction: str, answer: str, choices=("A", "B", "C", "D", "E")) -> bool:
    pred_tokens, ans_tokens = official_tokenize(prediction), official_tokenize(answer)
    if not pred_tokens:
        return False
    incorrect = set()
    for choice in choices:
        if official_tokenize(choice) != ans_tokens:
            incorrect |= official_tokenize(choice) - ans_tokens
    return ans_tokens.issubset(pred_tokens) and pred_tokens.isdisjoint(incorrect)


def official_compute_metrics(lines: list[dict]) -> dict[str, float]:
    correct = sum(official_is_prediction_correct(line["prediction"], line["label"]) for line in lines)
    labelled_e = [line for line in lines if line["label"] == "E"]
    hits = sum(line["prediction"] == "E" for line in labelled_e)
    return {"Overall_accuracy": correct / len(lines) * 100, "E_accuracy": hits / max(len(labelled_e), 1) * 100}


def test_official_scorer_beside_ours(official, release, tmp_path):
    """The numbers of docs/humblebench.md ("Scoring others' runs"): the official scorer and ours on the
    same prediction files."""
    assert official_is_prediction_correct("A cat.", "C") is False  # "a" is read as option A
    assert official_is_prediction_correct("E. None of the above", "E") is True
    theirs = {
        setting: official_compute_metrics(
            [json.loads(line) for line in (official / setting / "Toy-VL" / "Toy-VL.jsonl").read_text().splitlines()]
        )
        for setting in PREDICTIONS
    }
    assert {s: {k: round(v, 2) for k, v in m.items()} for s, m in theirs.items()} == {
        "common": {"Overall_accuracy": 66.67, "E_accuracy": 50.0},  # 3 ("... on a table") wrong; 5 no hit
        "noise_image": {"Overall_accuracy": 16.67, "E_accuracy": 50.0},  # labels stay: saying NOTA is wrong
        "nota_only": {"Overall_accuracy": 66.67, "E_accuracy": 50.0},  # "E." is right but no hit
    }
    assert score(official, release, tmp_path / "ours") == 0
    ours = metrics(tmp_path / "ours")
    assert round(100 * ours.loc["original", "overall"], 2) == 83.33
    assert round(100 * ours.loc["original", "nota_hit"], 2) == 100.0
    assert round(100 * ours.loc["noise", "overall"], 2) == 16.67  # the same labels as the official
    assert round(100 * ours.loc["noise", "nota_hit"], 2) == 50.0  # "E" and "E." alike
    assert round(100 * ours.loc["noise", "nota_selection"], 2) == 66.67  # the noise settings' headline
    assert round(100 * ours.loc["nota_only", "nota_hit"], 2) == 66.67
