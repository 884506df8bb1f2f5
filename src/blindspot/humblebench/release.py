"""HumbleBench's official release (in any of its formats, `models.releases`) read into question rows,
its images stored beside them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blindspot.humblebench.questions import question_row
from blindspot.humblebench.settings import LETTERS, Question
from blindspot.images import store_image_bytes
from blindspot.models.releases import release_records

OPTION_LINE = re.compile(r"^\s*\(?([A-E])[.)]\s*(.+?)\s*$")


def split_release_question(text: str, question_id: str) -> tuple[str, tuple[str, ...]]:
    """The release writes the options into the question ("...?\\nA. red\\n...\\nE. None of the above"):
    the stem and the option texts, which must be lettered A, B, ... in order."""
    stem, options = [], []
    for line in text.splitlines():
        match = OPTION_LINE.match(line)
        if match and match.group(1) == LETTERS[len(options)]:
            options.append(match.group(2))
        elif options and line.strip():
            raise ValueError(f"release question {question_id}: text after option {LETTERS[len(options) - 1]}")
        elif line.strip():
            stem.append(line.strip())
    if len(options) < 2 or not stem:
        raise ValueError(f"release question {question_id}: no stem and lettered options in {text!r}")
    return " ".join(stem), tuple(options)


def _release_image(image: Any, base: Path, image_dir: Path, question_id: str) -> str:
    """Where a release record's image is: its path (relative to `base`), or, for an image that comes as
    bytes, a file in `image_dir` named by its content, so questions about one image share one file."""
    if isinstance(image, Mapping) and not image.get("bytes"):
        image = image.get("path")
    if isinstance(image, str) and image:
        return str(base / image)
    data = image.get("bytes") if isinstance(image, Mapping) else image
    if not isinstance(data, bytes):
        raise ValueError(f"release question {question_id}: its image is {type(image).__name__}, not a path or bytes")
    return str(store_image_bytes(data, image_dir, f"release question {question_id}"))


def release_question(record: Mapping[str, Any]) -> Question:
    """One release record (question_id, question with its lettered options, label, type) as a `Question`."""
    question_id = str(record["question_id"])
    stem, options = split_release_question(record["question"], question_id)
    return Question(question_id, stem, options, str(record["label"]).strip(), str(record["type"]))


def checked_release_question(record: Mapping[str, Any], source: str) -> Question:
    """`release_question` of a record that has every field of a release's; one without is a ValueError
    naming `source` and what it lacks."""
    missing = {"question_id", "question", "type", "label", "image"} - set(record)
    if missing:
        raise ValueError(f"{source}: a release record lacks {sorted(missing)}")
    return release_question(record)


def load_release(source: str, image_dir: str | Path) -> list[dict[str, Any]]:
    """Question rows from the official release (any format `release_records` reads), with fields
    question_id, question, type, label and image. Images that come as bytes are written to `image_dir`
    unchanged, one file per distinct image."""
    image_dir = Path(image_dir)
    image_dir.mkdir(parents=True, exist_ok=True)
    base = Path(source).parent if Path(source).is_file() else Path(source)
    rows = []
    for record in release_records(source):
        question = checked_release_question(record, source)
        image_path = _release_image(record["image"], base, image_dir, question.question_id)
        rows.append(question_row(question, "release", image_path, {"release": source}, verified=True))
    return rows
