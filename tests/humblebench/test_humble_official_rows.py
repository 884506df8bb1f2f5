"""Every answer shape the official HumbleBench result files hold, read as a careful reader reads it:
rows of the official `results/` and `rebuttal_results/` files of the paper's 20 open models
(tests/data/humblebench_official_rows.jsonl), each with the letter a person reads in it (`reader`,
decided by reading the row, not by our parser). A row marked `limit` is one a person reads and ours
refuses: never a wrong letter."""

import json
import random
from pathlib import Path

import pytest
from helpers.humblebench_official import official_is_prediction_correct
from helpers.workflow import REPO

from blindspot.checks import load_config
from blindspot.cli import main
from blindspot.humblebench.external_answers import OFFICIAL_SETTINGS, read_predictions, release_questions
from blindspot.humblebench.parsing import parse_answer
from blindspot.humblebench.release import OPTION_LINE

ROWS = [
    json.loads(line) for line in (REPO / "tests" / "data" / "humblebench_official_rows.jsonl").open(encoding="utf-8")
]
CONFIG = str(REPO / "config" / "config.yaml")


def shown_options(question: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for line in question.splitlines() if (m := OPTION_LINE.match(line))}


def ours(row: dict) -> str | None:
    return parse_answer(row["prediction"], shown_options(row["question"]))


def row_id(row: dict) -> str:
    return f"{row['shape']}-{row['model']}-{row['question_id']}"


def test_the_rows_cover_the_paper_s_20_open_models():
    assert len({row["model"] for row in ROWS}) == 20


@pytest.mark.parametrize("row", sorted(ROWS, key=lambda row: row["shape"]), ids=row_id)
def test_an_official_row_reads_as_a_careful_reader_reads_it(row):
    if row.get("limit"):
        assert row["reader"] is not None
        assert ours(row) is None  # refused, never another letter
    else:
        assert ours(row) == row["reader"]


def folder(row: dict) -> str:
    """The official setting folder a row's file lies in (`<results>/<setting>/<Model>/<Model>.jsonl`)."""
    return Path(row["path"]).parts[1]


def release_record(row: dict) -> dict:
    """The release's record of a row's question, undoing what the official code did to it: the cautious or
    grounding prompt before it (up to the blank lines after it), and the shuffle of its five options by
    `Random(42 + question_id)`."""
    question = row["question"].split("\n\n\n")[-1]
    stem = question.split("\nA.")[0]
    options, label = shown_options(question), row["label"]
    if folder(row) == "shuffle_nota_position":
        old = list("ABCDE")
        random.Random(42 + row["question_id"]).shuffle(old)
        options = {was: options[new] for new, was in zip("ABCDE", old, strict=True)}
        label = old["ABCDE".index(label)]
    lines = [stem, *(f"{letter}. {options[letter]}" for letter in "ABCDE")]
    return {"question_id": row["question_id"], "question": "\n".join(lines), "type": row["type"], "label": label}


def official_folder(tmp_path: Path) -> tuple[Path, Path]:
    """The rows as the official code lays them out, `<setting>/<Model>/<Model>.jsonl`, and the release of
    their questions; every row's question read back from any row is the same release record."""
    release: dict[int, dict] = {}
    for row in ROWS:
        record = release_record(row)
        known = release.setdefault(row["question_id"], record)
        assert {k: known[k] for k in ("label", "type")} == {k: record[k] for k in ("label", "type")}
        assert shown_options(known["question"]) == shown_options(record["question"]), row_id(row)
        path = tmp_path / "results" / folder(row) / row["model"] / f"{row['model']}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        line = {key: row[key] for key in ("label", "question", "type", "question_id", "prediction")}
        with path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(line, ensure_ascii=False) + "\n")
    path = tmp_path / "release.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in release.values()))
    return tmp_path / "results", path


def test_humble_score_reads_every_official_row(tmp_path):
    results, release = official_folder(tmp_path)
    config = load_config(CONFIG)
    answers = read_predictions(str(results), release_questions(str(release)), config["humblebench"]["settings"], 0)
    read = {
        (row["vlm"], row["setting"], int(row["question_id"])): row["prediction_text"] for _, row in answers.iterrows()
    }
    expected = {
        (row["model"], OFFICIAL_SETTINGS[folder(row)], row["question_id"]): ""
        if row.get("limit")
        else row["reader"] or ""
        for row in ROWS
    }
    assert read == expected
    command = ["humble", "score", str(results), "--questions", str(release), "--out", str(tmp_path / "scored")]
    assert main([*command, "--configfile", CONFIG]) == 0


# Where the official scorer (word tokens) and ours part on these rows, and who is right:
# docs/humblebench.md, "Where the official scorer differs". (model, question id): (the official scorer
# counts it right, ours does).
PARTED = {
    # the article "a" in the chosen option's text ("C. A clock tower") is a second letter to it
    ("Mulberry", 19): (False, True),
    ("Mulberry", 20): (False, True),
    ("Ovis-2", 20): (False, True),
    ("Insight-V", 19): (False, True),
    # reasoning that rules other letters out before its conclusion ("This eliminates options A, D, and E")
    ("Ovis-2", 7): (False, True),
    ("Ovis-2", 11): (False, True),
    # prose naming no option, right for label A by its articles ("a room", "a giraffe")
    ("Insight-V", 1): (True, False),
    ("Molmo-D", 33): (True, False),
    # a fragment, " or E", labelled E: its one word that is a letter is the label
    ("Molmo-D", 17): (True, False),
}


def test_where_the_official_scorer_parts_from_ours():
    parted = {}
    for row in ROWS:
        theirs = official_is_prediction_correct(row["prediction"], row["label"])
        mine = ours(row) == row["label"]
        if theirs != mine:
            parted[row["model"], row["question_id"]] = (theirs, mine)
    assert parted == PARTED
