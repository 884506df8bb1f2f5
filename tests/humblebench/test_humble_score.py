"""`blindspot humble score`: answers made elsewhere (the official code's prediction files, or a plain
CSV) scored against the release, end to end through the CLI; the official scorer beside ours on the
same predictions (the numbers in docs/humblebench.md); and the reader on the official code's own result
files, lines copied verbatim (tests/data/humblebench_official)."""

import json
import random
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.humblebench_official import official_compute_metrics, official_is_prediction_correct

from blindspot.checks import load_config
from blindspot.cli import main
from blindspot.humblebench.external_answers import read_predictions, release_questions

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "config" / "config.yaml")
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
        "label": "E" if removed else label,
        "question": question_text(question_id, removed),
        "type": kind,
        "image": {"bytes": None, "path": path},
        "question_id": question_id,
        "prediction": prediction,
    }


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
    return main(
        [
            "humble",
            "score",
            str(predictions),
            "--questions",
            str(release),
            "--out",
            str(out),
            "--configfile",
            CONFIG,
            *extra,
        ]
    )


def metrics(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "tables" / "humblebench_metrics.csv").set_index("setting")


# Ours, by hand. Original: correct 1-5 (3 reads "C,"; 5 reads "E. None ..." as E); 6 says NOTA wrongly.
ORIGINAL = {
    "overall": 5 / 6,
    "object": 1.0,
    "attribute": 1.0,
    "relation": 0.5,
    "non_nota_accuracy": 3 / 4,
    "nota_hit": 1.0,
    "false_nota": 1 / 4,
    "humility": (1 + 3 / 4) / 2,
    "unparseable": 0.0,
    "macro_f1": (1 + 1 + 1 + 0 + 0.8) / 5,  # A, B, C perfect; D missed; E: 2 right, 1 false
    "d_prime": 2 * 0.6744897501960817,  # z(1 - 1/4) - z(1/4): a hit rate of 1 moves half a count in
}
# Noise: the labels stay A, B, C, E, E, D (officially and in the paper's Table 5); 1, 2 ("e"), 3 (NOTA's
# text) and 5 say NOTA, 4 says A, 6 names no option: only 5 is right.
NOISE = {
    "overall": 1 / 6,
    "nota_hit": 1 / 2,
    "false_nota": 3 / 4,
    "nota_selection": 4 / 6,
    "unparseable": 1 / 6,
    "humility": (1 / 2 + 1 - 3 / 4) / 2,
}
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
        "Model": "Toy-VL",
        "Original (Overall)": 83.33,
        "Noise image (NOTA sel.)": 66.67,
        "NOTA-only (NOTA hit)": 66.67,
    }
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
    lone.write_text(
        "".join(json.dumps(line | {"question": f"If unsure, say E.\n\n{line['question']}"}) + "\n" for line in cautious)
    )
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


# The official code's own result files (github.com/maifoundations/HumbleBench, MIT): a few lines of each,
# copied verbatim into `<setting>/<Model>/<Model>.jsonl` as `HumbleBench/utils/io.py` writes them, and the
# release's records of their questions (tests/data/humblebench_official/README.md).
OFFICIAL_DATA = Path(__file__).parents[1] / "data" / "humblebench_official"
RELEASE = OFFICIAL_DATA / "release.jsonl"
# Each verbatim line as our reader must take it, read by hand from the line: (label, NOTA's letter, letter
# map, parsed answer). The letter map is the shown letter of the release's options A to E in turn ("-":
# removed); the release has NOTA at E, written "None of above" in 44 and 45. "" is no letter. Keyed by
# (official folder, the config's setting, model) and question id.
VERBATIM = {
    ("common", "original", "Insight-V"): {  # the release's questions as they are
        1: ("B", "E", "ABCDE", ""),  # reasoning naming no option ("a room" is an article)
        12: ("B", "E", "ABCDE", ""),  # names no option
        13: ("A", "E", "ABCDE", "A"),  # "... Therefore, the correct answer is A.1."
        44: ("D", "E", "ABCDE", "E"),  # "... the correct answer is E. None of the above."
        45: ("E", "E", "ABCDE", "D"),  # "... the correct answer is D. A large glass bottle." ("A large": article)
    },
    ("shuffle_nota_position", "shuffled_nota", "Cambrian"): {  # all five permuted; (release letter) after each
        1: ("A", "B", "EADCB", "C"),  # A. Under (B), B. None of the above (E), C. On top of (D), D. In front of (C),
        # E. Next to (A); label A; "C"
        12: ("E", "B", "AECDB", "E"),  # A. Yes (A), B. None (E), C. Can't be determined (C), D. multiple (D), E. No (B)
        13: ("E", "C", "EDABC", "C"),  # A. 3 (C), B. 4 (D), C. None of the above (E), D. 2 (B), E. 1 (A); "C"
        44: ("C", "B", "EADCB", "E"),  # A. 2 (B), B. None of above (E), C. 4 (D), D. 3 (C), E. 1 (A); "E"
        45: ("D", "D", "BECAD", "D"),  # A. A large glass bottle (D), B. A wine glass (A), C. A sandwich (C),
        # D. None of above (E), E. A handbag (B); label D, NOTA itself; "D"
    },
    ("cautious_prompt", "cautious", "Gemma-3"): {  # the cautious prompt, a blank line, the release's question
        1: ("B", "E", "ABCDE", "D"),
        12: ("B", "E", "ABCDE", "C"),  # "A.Yes", "B.No": no space after the letter, as in the release
        13: ("A", "E", "ABCDE", "A"),
        44: ("D", "E", "ABCDE", "B"),
        45: ("E", "E", "ABCDE", "C"),
    },
    ("noise_image__forced_grounding_prompt", "noise_grounding", "LLaVA-Next"): {  # labels stay the release's
        1: ("B", "E", "ABCDE", "E"),  # "E " (a trailing space: officially no NOTA hit, as it is not exactly "E")
        12: ("B", "E", "ABCDE", "B"),  # "B "
        13: ("A", "E", "ABCDE", "E"),  # "E "
        44: ("D", "E", "ABCDE", "E"),  # "E "
        45: ("E", "E", "ABCDE", "E"),  # "E "
    },
    ("nota_only", "nota_only", "Insight-V"): {  # the correct option removed, its letter left a gap; label E
        1: ("E", "E", "A-CDE", ""),  # A. Next to, C. In front of, D. On top of, E. None of the above
        12: ("E", "E", "A-CDE", ""),  # "A. Yes", re-spaced by the official rebuild; names no option
        13: ("E", "E", "-BCDE", "B"),  # B. 2, C. 3, D. 4, E. None; "... the correct answer is B. 1."
        44: ("E", "E", "ABC-E", "E"),  # A. 1, B. 2, C. 3, E. None of above; "... the correct answer is E. None ..."
        45: ("E", "E", "ABCDE", "D"),  # labelled NOTA already: shown unchanged ("A.A wine glass"); "... is D. A ..."
    },
    ("noise_image", "noise", "Insight-V"): {  # labels stay the release's
        1: ("B", "E", "ABCDE", ""),  # names no option ("'in front of' or 'on top of'")
        12: ("B", "E", "ABCDE", ""),
        13: ("A", "E", "ABCDE", ""),
        44: ("D", "E", "ABCDE", "E"),  # "... Therefore, the correct answer is E. None of the above."
        45: ("E", "E", "ABCDE", "E"),  # the same ending
    },
}


def verbatim_lines(folder: str, model: str) -> list[dict]:
    path = OFFICIAL_DATA / folder / model / f"{model}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def official_reading() -> pd.DataFrame:
    """The verbatim folder read as `humble score` reads it, with the paper config's settings."""
    config = load_config(CONFIG)
    questions = release_questions(str(RELEASE))
    return read_predictions(str(OFFICIAL_DATA), questions, config["humblebench"]["settings"], config["seed"])


def test_official_result_lines_read_as_shown():
    rows = official_reading()
    found: dict = {}
    for row in rows.to_dict("records"):
        letter_map = json.loads(row["letter_map"])
        found.setdefault(row["setting"], {})[int(row["question_id"])] = (
            row["label"],
            row["nota"],
            "".join(letter_map[letter] or "-" for letter in "ABCDE"),
            row["prediction_text"],
        )
    assert found == {setting: lines for (_, setting, _), lines in VERBATIM.items()}
    for (folder, setting, model), lines in VERBATIM.items():
        answers = rows[rows["setting"] == setting]
        assert set(answers["vlm"]) == {model}
        # The raw answer is kept as the line has it, type and all.
        by_id = answers.set_index(answers["question_id"].astype(int))
        for line in verbatim_lines(folder, model):
            assert by_id.loc[line["question_id"], "answer"] == line["prediction"]
            assert by_id.loc[line["question_id"], "type"] == line["type"]
        assert [line["question_id"] for line in verbatim_lines(folder, model)] == list(lines)


def official_prefix(template: str) -> str:
    """What our prompt template puts before the question: the official prompt word for word and the
    blank line the official code adds (docs/fidelity.md H9)."""
    user = yaml.safe_load((ROOT / "config" / "prompts" / f"humble_{template}_v4.yaml").read_text())["user"]
    return user.split("{{ question }}")[0]


def official_dataloader(record: dict, folder: str) -> tuple[str, str, dict[str, str]]:
    """What the official `DataLoader` (`HumbleBench/utils/entity.py` at 6d33ea3) makes of a release record
    in a setting folder: the question and label it saves, and where each release option went ("" if
    removed). `_shuffle_sample_options` permutes all five options with `Random(42 + question_id)` and
    rebuilds the question ("A. text"); `_apply_nota_only` drops the correct option and rebuilds, unless the
    label is E; then the cautious or grounding prompt goes before the question, with a blank line."""
    flags = folder.split("__")
    lines = record["question"].strip().split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("A."))
    options = {letter: lines[start + i].strip()[2:].lstrip() for i, letter in enumerate("ABCDE")}
    moved = {letter: letter for letter in "ABCDE"}
    label, question = record["label"], record["question"]
    if "shuffle_nota_position" in flags:
        old = list("ABCDE")
        random.Random(42 + record["question_id"]).shuffle(old)
        options = {new: options[was] for new, was in zip("ABCDE", old, strict=True)}
        moved = {was: new for new, was in zip("ABCDE", old, strict=True)}
        label = moved[label]
    if "nota_only" in flags and label != "E":
        del options[label]
        moved = {was: "" if now == label else now for was, now in moved.items()}
        label = "E"
    if options.keys() != set("ABCDE") or "shuffle_nota_position" in flags:
        question = "\n".join([*lines[:start], *(f"{letter}. {text}" for letter, text in options.items())])
    for flag, template in (("cautious_prompt", "cautious"), ("forced_grounding_prompt", "grounding")):
        if flag in flags:
            question = official_prefix(template) + question
    return question, label, moved


def test_verbatim_lines_are_the_official_code_on_the_release():
    """The release file rebuilt for these questions, run through the official code's transforms, gives
    each verbatim line's question and label; our letter maps are the official code's; and our prompt
    templates carry the official prefixes as the result files show them."""
    release = {record["question_id"]: record for record in map(json.loads, RELEASE.read_text().splitlines())}
    rows = official_reading()
    for folder, setting, model in VERBATIM:
        for line in verbatim_lines(folder, model):
            question, label, moved = official_dataloader(release[line["question_id"]], folder)
            assert (line["question"], line["label"]) == (question, label), (folder, line["question_id"])
            row = rows[(rows["setting"] == setting) & (rows["question_id"] == str(line["question_id"]))].iloc[0]
            assert json.loads(row["letter_map"]) == moved, (folder, line["question_id"])


def test_verbatim_results_folder_scored_end_to_end(tmp_path):
    """`humble score` on the verbatim folder: six settings, one model each; the numbers follow from the
    table above (5 questions per setting)."""
    assert score(OFFICIAL_DATA, RELEASE, tmp_path / "scored") == 0
    found = metrics(tmp_path / "scored")
    assert found["vlm"].to_dict() == {setting: model for _, setting, model in VERBATIM}
    expected = {
        "original": {"overall": 1 / 5, "unparseable": 2 / 5},  # 13 right
        # 12 and 45 right; 13 and 45 say NOTA; 45, the one labelled NOTA (D), says it
        "shuffled_nota": {"overall": 2 / 5, "nota_selection": 2 / 5, "nota_hit": 1.0},
        "cautious": {"overall": 1 / 5, "nota_hit": 0.0},  # 13 right; 45 (labelled NOTA) says C
        "noise_grounding": {"overall": 2 / 5, "nota_selection": 4 / 5},  # 12 and 45 right; all but 12 say NOTA
        "nota_only": {"overall": 1 / 5, "nota_hit": 1 / 5, "unparseable": 2 / 5},  # 44 says NOTA
        "noise": {"overall": 1 / 5, "nota_selection": 2 / 5, "unparseable": 3 / 5},
    }
    for setting, values in expected.items():
        for name, value in values.items():
            assert found.loc[setting, name] == pytest.approx(value), (setting, name)


def test_official_scorer_parts_from_ours_on_verbatim_lines():
    """Where the official scorer (re-implemented above) and ours part on real lines (docs/humblebench.md,
    "Where the official scorer differs"; docs/fidelity.md H6)."""
    noise = {line["question_id"]: line for line in verbatim_lines("noise_image", "Insight-V")}
    # 13 names no option, but "a close-up view" holds the word "a": officially option A, the label, right.
    assert official_is_prediction_correct(noise[13]["prediction"], "A") is True
    assert VERBATIM["noise_image", "noise", "Insight-V"][13][3] == ""  # ours: unparseable, wrong
    # 45 ends "the correct answer is E. None of the above" after "a close-up view": officially two letters.
    assert official_is_prediction_correct(noise[45]["prediction"], "E") is False
    # Shuffled, a label of E is no longer NOTA, but the official NOTA hit (E_accuracy) still counts the
    # lines labelled E: 12 (E is "No", answered "E": a hit) and 13 (E is "1"). Ours counts 45, labelled
    # NOTA (D), which says D (the end-to-end test's nota_hit of 1).
    shuffled = verbatim_lines("shuffle_nota_position", "Cambrian")
    assert official_compute_metrics(shuffled) == {"Overall_accuracy": 40.0, "E_accuracy": 50.0}


def test_a_malformed_official_line_is_an_error_naming_file_and_line(tmp_path, capsys):
    """The official `load_saved_results` skips a line that is not JSON with a warning (an interrupted
    append can leave one); ours stops, naming the file and the line, rather than score fewer questions."""
    lone = tmp_path / "nota_only" / "Insight-V" / "Insight-V.jsonl"
    lone.parent.mkdir(parents=True)
    text = (OFFICIAL_DATA / "nota_only" / "Insight-V" / "Insight-V.jsonl").read_text(encoding="utf-8")
    lone.write_text(text + text.splitlines()[0][:80] + "\n", encoding="utf-8")
    message = _error(capsys, tmp_path, RELEASE, tmp_path / "out")
    assert f"{lone}: line 6 is not JSON" in message


def test_a_line_separator_inside_an_answer_is_not_a_line_break(tmp_path):
    """The official code writes `json.dumps(..., ensure_ascii=False)` and reads `for line in f`: a U+2028
    in a model's answer stays raw inside its line, which `str.splitlines` would cut in two."""
    folder = tmp_path / "common" / "Insight-V"
    folder.mkdir(parents=True)
    record = verbatim_lines("common", "Insight-V")[0] | {"prediction": "A\u2028because it is red"}
    (folder / "Insight-V.jsonl").write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    config = load_config(CONFIG)
    read = read_predictions(str(tmp_path), release_questions(str(RELEASE)), config["humblebench"]["settings"], 0)
    assert read["answer"].tolist() == ["A\u2028because it is red"]


def test_the_default_config_is_the_checkouts_from_any_folder(official, release, tmp_path, monkeypatch, capsys):
    """Without --configfile, the checkout's config/config.yaml, whose relative paths start at the checkout,
    wherever the command runs; the paths on the command line start where it runs."""
    monkeypatch.chdir(tmp_path)
    lone = Path("results") / "common" / "Toy-VL" / "Toy-VL.jsonl"
    assert main(["humble", "score", str(lone), "--questions", release.name, "--out", "scored"]) == 0
    assert Path.cwd() == tmp_path
    assert metrics(tmp_path / "scored").loc["original", "humility"] == pytest.approx(ORIGINAL["humility"])
    assert capsys.readouterr().out.startswith("Table 4:")


def test_a_release_that_is_not_json_lines_or_a_list_of_questions_is_one_line(official, release, tmp_path, capsys):
    good = release.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([good[0], good[1][:60], *good[2:]]) + "\n")
    opened = good[1].index('"question": "') + len('"question": ') + 1  # the column of the cut string's quote
    message = _error(capsys, official, broken, tmp_path / "o")
    expected = f"{broken}: line 2 is not JSON (Unterminated string starting at: column {opened})"
    assert message == f"blindspot: error: {expected}"
    as_object = tmp_path / "release.json"
    as_object.write_text(json.dumps({"questions": [json.loads(line) for line in good]}))
    assert _error(capsys, official, as_object, tmp_path / "o") == (
        f"blindspot: error: {as_object}: not a list of questions (JSON objects)"
    )
    tsv = tmp_path / "release.tsv"
    tsv.write_text("question_id\tquestion\n")
    assert _error(capsys, official, tsv, tmp_path / "o") == (
        f"blindspot: error: release {tsv}: a file must be .jsonl, .json or .parquet"
    )


def test_an_empty_predictions_csv_is_named(release, tmp_path, capsys):
    empty = tmp_path / "answers.csv"
    empty.write_text("")
    assert _error(capsys, empty, release, tmp_path / "o") == (
        f"blindspot: error: {empty}: an empty file, not a CSV with a header row"
    )


def test_the_setting_of_a_lone_file_is_the_option_or_its_folder_and_an_unknown_one_says_which(
    official, release, tmp_path, capsys
):
    text = (official / "common" / "Toy-VL" / "Toy-VL.jsonl").read_text()
    outside = tmp_path / "mypreds" / "Qwen.jsonl"  # not <setting>/<Model>/<Model>.jsonl
    outside.parent.mkdir()
    outside.write_text(text)
    message = _error(capsys, outside, release, tmp_path / "o")
    assert message.startswith(
        f"blindspot: error: {outside}: not in the official layout <setting>/<Model>/<Model>.jsonl, whose folder "
        "names the setting: give the setting with --setting (official: common, "
    )
    assert score(outside, release, tmp_path / "o", "--setting", "common") == 0
    laid_out = tmp_path / "hb" / "Qwen" / "Qwen.jsonl"
    laid_out.parent.mkdir(parents=True)
    laid_out.write_text(text)
    message = _error(capsys, laid_out, release, tmp_path / "o")
    assert message.startswith(f"blindspot: error: {laid_out}: unknown setting: 'hb' is not a setting of the config")
    assert message.endswith(
        "; the setting is read from the folder above its model's (<setting>/<Model>/<Model>.jsonl); give another "
        "with --setting"
    )
    message = _error(capsys, laid_out, release, tmp_path / "o", "--setting", "sepia")
    assert message.endswith("; the setting is read from --setting")


def test_out_that_is_a_file_is_one_line(official, release, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("")
    for out in (taken, taken / "below"):
        message = _error(capsys, official, release, out)
        assert message == f"blindspot: error: --out {out}: {taken} is a file, not a folder"


def test_people_s_answers_add_table7_on_the_same_questions(official, release, tmp_path, capsys):
    """`--human-answers` names people's answers (a CSV, or the humble_answer project's labels): Table 7
    puts them beside the model's answers on the same questions."""
    humans = tmp_path / "humans.csv"
    humans.write_text(
        "annotator,question_id,setting,answer\nann1,1,original,A\nann1,2,original,A\n"
        "ann1,4,original,E\nann1,3,nota_only,E\n"
    )
    assert score(official, release, tmp_path / "scored", "--human-answers", str(humans)) == 0
    table = pd.read_csv(tmp_path / "scored" / "tables" / "table7_humblebench_humans.csv").set_index("Model")
    assert list(table.columns) == ["Overall", "Non-NOTA", "NOTA hit", "False-NOTA", "HS", "NOTA hit (stress)"]
    # ann1 misses question 2 (B) and says NOTA on question 3 without its answer; Toy-VL gets 1, 2 and 4 right
    assert table.loc["Human (mean of 1)"].tolist() == [66.67, 50.0, 100.0, 0.0, 100.0, 100.0]
    assert table.loc["Toy-VL"].tolist() == [100.0, 100.0, 100.0, 0.0, 100.0, 0.0]
    # the same answers as the project's labels give the same table
    given = [("1", "original", "A"), ("2", "original", "A"), ("4", "original", "E"), ("3", "nota_only", "E")]
    labels = [
        {
            "id": i,
            "data": {"item_id": f"{setting}:{question}", "annotator": "ann1"},
            "annotations": [
                {
                    "completed_by": {"email": "ann1"},
                    "result": [{"from_name": "answer", "type": "choices", "value": {"choices": [answer]}}],
                }
            ],
        }
        for i, (question, setting, answer) in enumerate(given)
    ]
    (tmp_path / "labels.json").write_text(json.dumps(labels))
    assert score(official, release, tmp_path / "labelled", "--human-answers", str(tmp_path / "labels.json")) == 0
    labelled = pd.read_csv(tmp_path / "labelled" / "tables" / "table7_humblebench_humans.csv").set_index("Model")
    pd.testing.assert_frame_equal(labelled, table)
    capsys.readouterr()
    humans.write_text("annotator,question_id,setting,answer\nann1,99,original,A\n")
    message = _error(capsys, official, release, tmp_path / "unknown", "--human-answers", str(humans))
    assert message.endswith("human answer to question 99 in setting original, which no model was asked")


def test_a_question_answered_twice_is_refused_naming_the_question_and_the_file(official, release, tmp_path, capsys):
    common = official / "common" / "Toy-VL" / "Toy-VL.jsonl"
    with common.open("a") as lines:  # a run resumed by hand, question 3 asked again
        lines.write(json.dumps(official_line(3, "common", "B")) + "\n")
    message = _error(capsys, official, release, tmp_path / "o")
    assert message == (
        f"blindspot: error: {common}: line 7: question 3 is answered twice by Toy-VL in setting original "
        f"(first at {common}: line 3); keep one answer per question"
    )
    assert not (tmp_path / "o").exists()
    plain = tmp_path / "answers.csv"
    plain.write_text("question_id,setting,model,answer\n1,common,Toy,A\n2,common,Toy,B\n1,original,Toy,E\n")
    assert _error(capsys, plain, release, tmp_path / "o").endswith(
        f"{plain}: row 4: question 1 is answered twice by Toy in setting original (first at {plain}: row 2); "
        "keep one answer per question"
    )
    # The same question by another model, or in another setting, is no repeat.
    plain.write_text("question_id,setting,model,answer\n1,common,Toy,A\n1,common,Other,B\n1,nota_only,Toy,E\n")
    assert score(plain, release, tmp_path / "o") == 0


def test_the_official_shuffle_shows_each_real_question_as_the_official_code(tmp_path):
    """`shuffle_options` (the paper config's Shuffled NOTA) against the official `DataLoader` above, on the
    release's real question ids: the same options at the same letters and the same label, whatever the
    run's seed; the verbatim shuffled lines show them so; and a CSV of answers to them reads as shown."""
    from blindspot.humblebench.release import release_question
    from blindspot.humblebench.settings import present, setting_transforms

    settings = load_config(CONFIG)["humblebench"]["settings"]
    transforms = setting_transforms(settings["shuffled_nota"])
    assert transforms == {"shuffle_options": True}
    records = {record["question_id"]: record for record in map(json.loads, RELEASE.read_text().splitlines())}
    lines = {line["question_id"]: line for line in verbatim_lines("shuffle_nota_position", "Cambrian")}
    moved_somewhere = 0
    for question_id, record in records.items():
        question, label, moved = official_dataloader(record, "shuffle_nota_position")
        for seed in (0, 3720):
            shown = present(release_question(record, str(RELEASE)), "shuffled_nota", transforms, seed)
            assert shown.letter_map == moved, question_id
            assert shown.label == label, question_id
            options = zip(shown.letters, shown.options, strict=True)
            assert question.endswith("\n".join(f"{letter}. {text}" for letter, text in options))
        assert (lines[question_id]["question"], lines[question_id]["label"]) == (question, label)
        moved_somewhere += moved != {letter: letter for letter in "ABCDE"}
    assert moved_somewhere == len(records)
    # The Cambrian lines as a plain CSV: the config shows each question as the official code did, so the
    # same answers score the same as the official files.
    plain = tmp_path / "answers.csv"
    rows = [(qid, "shuffled_nota", "Cambrian", line["prediction"]) for qid, line in lines.items()]
    pd.DataFrame(rows, columns=["question_id", "setting", "model", "answer"]).to_csv(plain, index=False)
    assert score(plain, RELEASE, tmp_path / "csv") == 0
    folder = tmp_path / "official" / "shuffle_nota_position" / "Cambrian"
    folder.mkdir(parents=True)
    verbatim = OFFICIAL_DATA / "shuffle_nota_position" / "Cambrian" / "Cambrian.jsonl"
    (folder / "Cambrian.jsonl").write_text(verbatim.read_text(encoding="utf-8"), encoding="utf-8")
    assert score(tmp_path / "official", RELEASE, tmp_path / "jsonl") == 0
    as_csv, as_jsonl = (metrics(tmp_path / name).loc[["shuffled_nota"]] for name in ("csv", "jsonl"))
    pd.testing.assert_frame_equal(as_csv, as_jsonl)
    assert as_csv.loc["shuffled_nota", "overall"] == pytest.approx(2 / 5)  # as the verbatim test above


def test_two_shuffles_in_one_setting_are_refused():
    from blindspot.humblebench.settings import Question, present

    question = Question("7", "What colour?", ("Red", "Blue", "Green", "White", "None of the above"), "B", "Attribute")
    with pytest.raises(ValueError, match="setting s: shuffle_options and shuffle_nota are two shuffles; set one"):
        present(question, "s", {"shuffle_options": True, "shuffle_nota": True}, 0)
    # The project's own ids (no integer) shuffle too, by the id alone.
    own = Question("bench-1f3a", question.question, question.options, "B", "Attribute")
    shown = {present(own, "s", {"shuffle_options": True}, seed).letter_map["E"] for seed in range(5)}
    assert len(shown) == 1
