"""Score HumbleBench answers that were made elsewhere (`blindspot humble score`): the prediction files
the official code writes, or a plain `question_id,setting,model,answer` CSV, read against the release
into answer rows, then every metric, Tables 4 to 6 and the NOTA plot, as the workflow writes them.

The official code (github.com/maifoundations/HumbleBench, `HumbleBench/utils/io.py`) writes
`<results>/<setting>/<Model>/<Model>.jsonl`, one line per question: `label, question, type, image,
question_id, prediction`, where `question` holds the options as shown (a NOTA-only question keeps its
letters with a gap) and `prediction` is the model's raw answer. Each line is read as it was shown: the
option lines of its question are matched to the release's options, which gives the letter map, NOTA's
letter and the label. In the noise settings the label stays the question's, as the official code and
the paper's Table 5 have it, although no option is supported any more (docs/fidelity.md H7).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot.hub.datasets import release_records
from blindspot.humblebench.parsing import parse_answer
from blindspot.humblebench.release import OPTION_LINE, release_question
from blindspot.humblebench.settings import LETTERS, Question, nota_letter, present, setting_transforms
from blindspot.humblebench.tables import report_tables, write_report
from blindspot.io import jsonl_records, read_csv
from blindspot.targets import PATHS, TABLE_FORMATS

# The official code's setting folders (`build_setting_name`: the active flags joined by "__") and the
# paper config's settings they are.
OFFICIAL_SETTINGS = {
    "common": "original",
    "shuffle_nota_position": "shuffled_nota",
    "cautious_prompt": "cautious",
    "noise_image": "noise",
    "noise_image__forced_grounding_prompt": "noise_grounding",
    "nota_only": "nota_only",
}
OFFICIAL_FIELDS = ("label", "question", "type", "question_id", "prediction")
PLAIN_COLUMNS = ("question_id", "setting", "model", "answer")
READING = "text"


def release_questions(source: str) -> dict[str, Question]:
    """The release's questions by id, from any format `hub.datasets.release_records` reads; images are
    neither decoded nor written."""
    questions = {}
    for number, record in enumerate(release_records(source), start=1):
        missing = {"question_id", "question", "type", "label"} - set(record)
        if missing:
            raise ValueError(f"{source}: a release record lacks {sorted(missing)}")
        question = release_question(record, source, number)
        questions[question.question_id] = question
    if not questions:
        raise ValueError(f"{source}: the release has no questions")
    return questions


def release_images(source: str) -> dict[str, str]:
    """Each release question's image as the release names it (a file name or path), where it names one: the
    unit its metrics' intervals resample (`humility_intervals`)."""
    images = {}
    for record in release_records(source):
        image = record.get("image")
        name = image.get("path") if isinstance(image, dict) else image
        if isinstance(name, str) and name:
            images[str(record["question_id"])] = name
    return images


# Its flags, any of which a setting folder may join.
OFFICIAL_FLAGS = ("noise_image", "nota_only", "shuffle_nota_position", "cautious_prompt", "forced_grounding_prompt")


def our_setting(name: str, settings: Mapping[str, Any]) -> str:
    """The config's setting that `name` (an official setting folder, or a config setting) is."""
    ours = OFFICIAL_SETTINGS.get(name, name)
    if ours in settings:
        return ours
    if name in OFFICIAL_SETTINGS:
        problem = f"the official {name!r} is {ours!r}, which is not a setting of the config"
    elif set(name.split("__")) <= set(OFFICIAL_FLAGS):
        problem = f"the official {name!r} is none of the paper's settings"
    else:
        problem = f"{name!r} is not a setting of the config"
    raise ValueError(
        f"unknown setting: {problem} (config: {', '.join(settings)}; official: {', '.join(OFFICIAL_SETTINGS)})"
    )


def _question(questions: Mapping[str, Question], question_id: Any, where: str) -> Question:
    question = questions.get(str(question_id))
    if question is None:
        raise ValueError(f"{where}: question {question_id} is not in the release")
    return question


def _answer_row(
    model: str,
    setting: str,
    question: Question,
    shown: Mapping[str, str],
    label: str,
    nota: str,
    letter_map: Mapping[str, str],
    answer: Any,
) -> dict[str, Any]:
    """One answer row as `tables.metrics_table` reads it; `shown` maps each shown letter to its text."""
    prediction = parse_answer(answer, shown) if isinstance(answer, str) else None
    return {
        "vlm": model,
        "setting": setting,
        "question_id": question.question_id,
        "type": question.type,
        "label": label,
        "nota": nota,
        "letter_map": json.dumps(dict(letter_map), sort_keys=True),
        "answer": answer,
        f"prediction_{READING}": prediction or "",
    }


def shown_options(question: Question, text: str, where: str) -> dict[str, str]:
    """The original letter -> shown letter of each of the release's options that the question as shown
    (`text`) lists, from its option lines ("C. red", "C.red"); a removed option is left out."""
    remaining = dict(zip(LETTERS, question.options, strict=False))
    moved = {}
    for line in text.splitlines():
        match = OPTION_LINE.match(line)
        if not match:
            continue
        letter, option = match.groups()
        original = next((old for old, known in remaining.items() if known == option), None)
        if original is not None and letter not in moved.values():
            moved[original] = letter
            del remaining[original]
    nota = nota_letter(question.options, question.question_id)
    if nota not in moved or len(moved) < len(question.options) - 1:
        raise ValueError(
            f"{where}: question {question.question_id} shows {len(moved)} of the release's {len(question.options)} "
            "options (all, or all but the correct one, NOTA among them): was it run on another release?"
        )
    return moved


def official_rows(
    records: Iterator[tuple[int, dict[str, Any]]],
    model: str,
    setting: str,
    transforms: Mapping[str, Any],
    questions: Mapping[str, Question],
    where: str,
) -> list[dict[str, Any]]:
    """Answer rows from the official code's prediction lines (line number, record) of one model and
    setting."""
    rows = []
    for number, record in records:
        at = f"{where}: line {number}"
        missing = [name for name in OFFICIAL_FIELDS if name not in record]
        if missing:
            raise ValueError(f"{at} lacks {missing} (an official prediction line has {', '.join(OFFICIAL_FIELDS)})")
        question = _question(questions, record["question_id"], at)
        moved = shown_options(question, str(record["question"]), at)
        letter_map = {old: moved.get(old, "") for old in LETTERS[: len(question.options)]}
        nota = letter_map[nota_letter(question.options)]
        label = letter_map[question.label] or nota  # NOTA-only removed the correct option
        if str(record["label"]).strip() != label:
            raise ValueError(
                f"{at}: question {question.question_id} is labelled {record['label']!r}, but the release's correct "
                f"option is shown as {label!r}"
            )
        shown = {moved[old]: text for old, text in zip(LETTERS, question.options, strict=False) if old in moved}
        row = _answer_row(model, setting, question, shown, label, nota, letter_map, record["prediction"])
        rows.append(row | {"where": at})
    return rows


LAYOUT = "<setting>/<Model>/<Model>.jsonl"


def official_files(predictions: Path, setting: str | None) -> list[tuple[Path, str, str]]:
    """(file, model, official or config setting) of each prediction file: a results folder in the
    official layout, `<setting>/<Model>/<Model>.jsonl`, or one file, whose setting is `setting` or, in
    that layout, the name of the folder above its model's."""
    if predictions.is_file():
        if not setting and predictions.parent.name != predictions.stem:
            raise ValueError(
                f"{predictions}: not in the official layout {LAYOUT}, whose folder names the setting: give the "
                f"setting with --setting (official: {', '.join(OFFICIAL_SETTINGS)}; or a setting of the config)"
            )
        return [(predictions, predictions.stem, setting or predictions.parent.parent.name)]
    found = sorted(path for path in predictions.rglob("*.jsonl") if path.stem == path.parent.name)
    if not found:
        raise ValueError(f"{predictions}: no prediction files in the official layout {LAYOUT}")
    return [(path, path.stem, setting or path.parent.parent.name) for path in found]


def file_setting(file: Path, name: str, settings: Mapping[str, Any], given: bool) -> str:
    """`our_setting` of a prediction file's setting `name`, which is the --setting option's (`given`) or
    the name of the folder above its model's; an unknown one says which."""
    try:
        return our_setting(name, settings)
    except ValueError as error:
        source = "--setting" if given else f"the folder above its model's ({LAYOUT}); give another with --setting"
        raise ValueError(f"{file}: {error}; the setting is read from {source}") from None


def plain_rows(
    path: Path, questions: Mapping[str, Question], settings: Mapping[str, Any], seed: int
) -> list[dict[str, Any]]:
    """Answer rows from a `question_id,setting,model,answer` CSV: each question as the config's setting
    shows it (`settings.present`), its answer read by the parser. An empty answer is unparseable."""
    frame = read_csv(path, dtype=str, keep_default_na=False)
    missing = [column for column in PLAIN_COLUMNS if column not in frame.columns]
    if missing:
        raise ValueError(f"{path}: predictions lack columns {missing} (have {list(frame.columns)})")
    rows = []
    for number, record in enumerate(frame.to_dict("records"), start=2):
        at = f"{path}: row {number}"
        question = _question(questions, record["question_id"], at)
        try:
            setting = our_setting(record["setting"], settings)
        except ValueError as error:
            raise ValueError(f"{at}: {error}") from None
        shown = present(question, setting, setting_transforms(settings[setting]), seed)
        options = dict(zip(shown.letters, shown.options, strict=True))
        row = _answer_row(
            record["model"], setting, question, options, shown.label, shown.nota, shown.letter_map, record["answer"]
        )
        rows.append(row | {"where": at})
    return rows


def refuse_twice(rows: list[dict[str, Any]]) -> None:
    """A question answered twice by one model in one setting is refused in one line naming the question
    and where both answers are (file and line or row): which of the two is meant cannot be known."""
    seen: dict[tuple[str, str, str], str] = {}
    for row in rows:
        key = (row["vlm"], row["setting"], row["question_id"])
        if key in seen:
            raise ValueError(
                f"{row['where']}: question {row['question_id']} is answered twice by {row['vlm']} in setting "
                f"{row['setting']} (first at {seen[key]}); keep one answer per question"
            )
        seen[key] = row["where"]


def read_predictions(
    predictions: str,
    questions: Mapping[str, Question],
    settings: Mapping[str, Any],
    seed: int,
    setting: str | None = None,
) -> pd.DataFrame:
    """Answer rows from a plain CSV (`.csv`) or the official code's prediction files. A question
    answered twice by one model in one setting is an error naming the question and both places
    (`refuse_twice`), where the official reader (`load_saved_results`) keeps the last line silently.
    Unlike it, which skips a line that is not JSON with a warning, a line that is not a JSON object, or
    lacks an official field, is an error naming its file and line."""
    path = Path(predictions)
    if not path.exists():
        raise FileNotFoundError(f"{predictions}: no such file or folder")
    if path.suffix == ".csv":
        rows = plain_rows(path, questions, settings, seed)
    else:
        rows = []
        for file, model, name in official_files(path, setting):
            ours = file_setting(file, name, settings, given=bool(setting))
            rows += official_rows(
                jsonl_records(file), model, ours, setting_transforms(settings[ours]), questions, str(file)
            )
    if not rows:
        raise ValueError(f"{predictions}: no predictions")
    refuse_twice(rows)
    return pd.DataFrame(rows).drop(columns="where")


def score(
    predictions: str,
    release: str,
    humblebench: Mapping[str, Any],
    seed: int,
    out: str,
    setting: str | None = None,
    humans: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, str]:
    """Score predictions made elsewhere against the release: write the metrics, Tables 4 to 6 (and 7,
    given people's answers, `humans`: `schemas.HUMAN_ANSWERS`) and the NOTA plot under `out` where the
    workflow writes them under its results folder; return Table 4 and its caption. `humblebench` is the
    config's section: its settings, and Table 4's setting."""
    existing = next(folder for folder in (Path(out), *Path(out).parents) if folder.exists())
    if not existing.is_dir():
        raise ValueError(f"--out {out}: {existing} is a file, not a folder")
    settings = humblebench["settings"]
    answers = read_predictions(predictions, release_questions(release), settings, seed, setting)
    original = humblebench["tables"]["original"]
    used = {
        name: {"label": entry["label"], "headline": entry["headline"]}
        for name, entry in settings.items()
        if name == original or name in set(answers["setting"])
    }
    named = humblebench["tables"]
    found, report = report_tables(
        answers,
        humans,
        READING,
        used,
        original,
        named.get("stress"),
        named.get("cautious"),
        readings=(READING,),
        images=release_images(release),
        seed=seed,
    )
    files = {name: [PATHS[name].format(results=out, ext=ext) for ext in TABLE_FORMATS] for name in report}
    write_report(
        found,
        report,
        READING,
        used,
        PATHS["humble_metrics"].format(results=out),
        files,
        PATHS["nota_plot"].format(results=out),
    )
    return report["table4"]
