"""HumbleBench's official release (in any of its formats, `hub.datasets`) read into question rows,
its images stored beside them."""

from __future__ import annotations

import re
import reprlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blindspot.hub.datasets import release_records
from blindspot.humblebench.questions import question_row
from blindspot.humblebench.settings import LETTERS, Question
from blindspot.images import IMAGE_BYTES, check_images, store_image_bytes

OPTION_LINE = re.compile(r"^\s*\(?([A-E])[.)]\s*(.+?)\s*$")


def split_release_question(text: str, where: str) -> tuple[str, tuple[str, ...]]:
    """The release writes the options into the question ("...?\\nA. red\\n...\\nE. None of the above"):
    the stem and the option texts, which must be lettered A, B, ... in order. `where` names the question
    in a message."""
    stem, options = [], []
    for line in text.splitlines():
        match = OPTION_LINE.match(line)
        if match and match.group(1) == LETTERS[len(options)]:
            options.append(match.group(2))
        elif options and line.strip():
            raise ValueError(f"{where}: text after option {LETTERS[len(options) - 1]}")
        elif line.strip():
            stem.append(line.strip())
    if len(options) < 2 or not stem:
        raise ValueError(f"{where}: no stem and lettered options in {text!r}")
    return " ".join(stem), tuple(options)


def _release_image(image: Any, base: Path, image_dir: Path, where: str) -> tuple[str, str]:
    """(what names a release record's image in a message, its file): its path (relative to `base`), or,
    for an image that comes as bytes, a file in `image_dir` named by its content, so questions about one
    image share one file."""
    if isinstance(image, Mapping) and not image.get("bytes"):
        image = image.get("path")
    if isinstance(image, str) and image:
        return str(base / image), str(base / image)
    data = image.get("bytes") if isinstance(image, Mapping) else image
    if data is None or isinstance(data, str):  # a path is a text that is not empty
        raise ValueError(f"{where}: no image (a path or an image's bytes)")
    if not isinstance(data, bytes):
        raise ValueError(f"{where}: its image is {type(data).__name__} {reprlib.repr(data)}, not a path or bytes")
    return IMAGE_BYTES, str(store_image_bytes(data, image_dir, where))


def release_question(record: Mapping[str, Any], source: str, number: int | None = None) -> Question:
    """One release record (question_id, question with its lettered options, label, type) of the release
    `source` as a `Question`; one whose fields are not text (an id may be a number), or whose question is
    not a stem with lettered options and a label among them, is a ValueError naming `source` and the
    question (or the record's `number`, counted from 1, where its id is wrong)."""
    question_id = record["question_id"]
    if not isinstance(question_id, str | int) or isinstance(question_id, bool):
        record_named = f"record {number}'s" if number else "a"
        raise ValueError(
            f"release {source}: {record_named} question_id is {reprlib.repr(question_id)}, not text or a number"
        )
    where = f"release {source}, question {question_id}"
    for field in ("question", "label", "type"):
        if not isinstance(record[field], str):
            raise ValueError(
                f"{where}: its {field} is {type(record[field]).__name__} {reprlib.repr(record[field])}, not text"
            )
    stem, options = split_release_question(record["question"], where)
    try:
        return Question(str(question_id), stem, options, record["label"].strip(), record["type"])
    except ValueError as error:  # the question's own checks name it ("question q1: ..."): and its release
        raise ValueError(f"release {source}, {error}") from None


def checked_release_question(record: Mapping[str, Any], source: str, number: int) -> Question:
    """`release_question` of the `number`th record (counted from 1) of the release `source`, which must have
    every field of a release's; one without is a ValueError naming `source` and the record."""
    missing = {"question_id", "question", "type", "label", "image"} - set(record)
    if missing:
        named = f"question {record['question_id']}" if "question_id" in record else f"record {number}"
        raise ValueError(f"release {source}, {named}: lacks {sorted(missing)}")
    return release_question(record, source, number)


def load_release(source: str, image_dir: str | Path) -> list[dict[str, Any]]:
    """Question rows from the official release (any format `release_records` reads), with fields
    question_id, question, type, label and image. Images that come as bytes are written to `image_dir`
    unchanged, one file per distinct image. Every record is checked, and every image read whole
    (`images.check_images`), before any row is returned: one that is not stops with one line naming the
    release, the question and, for an image, its file and what is wrong with it."""
    image_dir = Path(image_dir)
    image_dir.mkdir(parents=True, exist_ok=True)
    base = Path(source).parent if Path(source).is_file() else Path(source)
    rows, images, numbers = [], [], {}
    for number, record in enumerate(release_records(source), start=1):
        question = checked_release_question(record, source, number)
        where = f"release {source}, question {question.question_id}"
        first = numbers.setdefault(question.question_id, number)
        if first != number:
            raise ValueError(f"{where}: given twice, by records {first} and {number} (counted from 1)")
        name, image_path = _release_image(record["image"], base, image_dir, where)
        images.append((f"{where}: {name}", image_path))
        rows.append(question_row(question, "release", image_path, {"release": source}, verified=True))
    check_images(images)
    return rows
