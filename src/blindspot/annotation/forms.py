"""What the built-in annotation page (`blindspot.annotation.server`) accepts as a label: each task's
form fields, checked, as the value it stores."""

from __future__ import annotations

import json
import re
from typing import Any

from blindspot.annotation.projects import PAIR_CHOICES
from blindspot.humblebench.questions import DECISIONS
from blindspot.humblebench.settings import LETTERS, TYPES, Question

EDIT_FIELDS = {"question", "options", "label"}


def parse_value(task: str, form: dict[str, str], item: dict[str, Any] | None = None) -> dict[str, Any]:
    """The label a form submits for `item`, checked; ValueError names what is wrong."""
    if task == "humble_answer":
        shown = (item or {}).get("letters", LETTERS)
        if form.get("answer") not in set(shown):
            raise ValueError(f"answer must be one of the letters shown: {', '.join(shown)}")
        return {"answer": form["answer"]}
    if task == "image_score":
        score = form.get("score", "")
        if not re.fullmatch(r"[0-9]{1,2}", score) or not 1 <= int(score) <= 10:
            raise ValueError(f"score must be a whole number from 1 to 10 in ASCII digits, not {score[:20]!r}")
        return {"score": int(score)}
    if task == "pairwise":
        if form.get("choice") not in PAIR_CHOICES:
            raise ValueError(f"choice must be one of {', '.join(PAIR_CHOICES)}")
        return {"choice": form["choice"]}
    if form.get("decision") not in DECISIONS:
        raise ValueError(f"decision must be one of {', '.join(DECISIONS)}")
    if form["decision"] != "modify":  # a stray edit would make two people's equal decisions disagree
        return {"decision": form["decision"], "edit": ""}
    return {"decision": "modify", "edit": json.dumps(parse_edit(form.get("edit", ""), form["item_id"]))}


def parse_edit(text: str, item_id: str) -> dict[str, Any]:
    """A question-check edit, checked as a HumbleBench question (`settings.Question`): a JSON object
    with the question, its options (NOTA among them) and the correct letter, and optionally its type."""
    try:
        edit = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
        raise ValueError('modify needs the edit as JSON: {"question": ..., "options": [...], "label": ...}') from None
    if not isinstance(edit, dict) or not EDIT_FIELDS <= set(edit) <= EDIT_FIELDS | {"type"}:
        raise ValueError(
            f"the edit must be a JSON object with {', '.join(sorted(EDIT_FIELDS))} (and optionally type), nothing else"
        )
    if not isinstance(edit["question"], str) or not edit["question"].strip():
        raise ValueError("the edit's question must be a non-empty string")
    if not isinstance(edit["options"], list) or not all(isinstance(o, str) and o.strip() for o in edit["options"]):
        raise ValueError("the edit's options must be a list of non-empty strings")
    if not isinstance(edit["label"], str):
        raise ValueError("the edit's label must be a letter")
    if edit.get("type", TYPES[0]) not in TYPES:
        raise ValueError(f"the edit's type must be one of {', '.join(TYPES)}")
    Question(item_id, edit["question"], tuple(edit["options"]), edit["label"], edit.get("type", ""))
    return edit
