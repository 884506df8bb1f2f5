"""HumbleBench: multiple-choice questions whose options always include "None of the above" (NOTA),
the six evaluation settings, the answer parser and the NOTA-aware metrics.

A question has five options, A-E, one of which is NOTA (E in the release). A setting turns a question
into what the model is shown (`present`), recording how letters moved; settings are data in config
(`humblebench.settings`): a prompt template and up to three transforms:
- `shuffle_nota`: NOTA moves to a position drawn from the question id and the seed; the other
  options keep their order, letters are re-assigned, and the map from old to new letters is kept.
- `noise_image`: a noise image drawn from the question id and the seed replaces the real one; no
  option is supported any more, so NOTA becomes the label.
- `remove_correct`: the correct option is removed and the rest re-lettered, so NOTA becomes the
  label. A question whose label already is NOTA is shown unchanged.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from blindspot.images import image_batches, read_rgb
from blindspot.prompts import PromptTemplate
from blindspot.vlm_scoring import image_conversation

LETTERS = "ABCDE"
NOTA_TEXT = "None of the above"
TYPES = ("Object", "Attribute", "Relation")
TRANSFORMS = ("shuffle_nota", "noise_image", "remove_correct")


@dataclass(frozen=True)
class Question:
    question_id: str
    question: str
    options: tuple[str, ...]  # option texts in letter order (A, B, ...), NOTA among them
    label: str  # the correct letter
    type: str  # Object, Attribute or Relation

    def __post_init__(self) -> None:
        if not 2 <= len(self.options) <= len(LETTERS):
            raise ValueError(f"question {self.question_id}: {len(self.options)} options (2 to {len(LETTERS)})")
        if self.label not in LETTERS[: len(self.options)]:
            raise ValueError(f"question {self.question_id}: label {self.label!r} is not one of its option letters")
        nota_letter(self.options, self.question_id)


@dataclass(frozen=True)
class Presented:
    """A question as one setting shows it."""

    question_id: str
    setting: str
    question: str
    options: tuple[str, ...]
    label: str
    nota: str  # the letter of NOTA as shown
    type: str
    noise_image: bool
    letter_map: dict[str, str] = field(default_factory=dict)  # original letter -> shown letter ("" if removed)

    def prompt_fields(self) -> dict[str, str]:
        return {
            "question": self.question,
            "options": lettered(self.options),
            "letters": ", ".join(LETTERS[: len(self.options)]),
        }


def lettered(options: Sequence[str]) -> str:
    """Options as a question shows them, one per line: "A. red"."""
    return "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, options, strict=False))


def is_nota(text: str) -> bool:
    return text.strip().rstrip(".").lower() == NOTA_TEXT.lower()


def nota_letter(options: Sequence[str], question_id: str = "") -> str:
    found = [LETTERS[i] for i, text in enumerate(options) if is_nota(text)]
    if len(found) != 1:
        raise ValueError(f"question {question_id}: {len(found)} options read '{NOTA_TEXT}' (needs exactly one)")
    return found[0]


def draw(seed: int, *parts: str) -> np.random.Generator:
    """A generator for one question in one setting, the same on every run and machine."""
    digest = hashlib.sha256("\0".join([str(seed), *parts]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def present(question: Question, setting: str, transforms: Mapping[str, Any], seed: int) -> Presented:
    """`question` as the setting named `setting` shows it; `transforms` is the setting's config."""
    unknown = set(transforms) - set(TRANSFORMS) - {"template", "label", "headline"}
    if unknown:
        raise ValueError(f"setting {setting}: unknown keys {sorted(unknown)} (transforms: {', '.join(TRANSFORMS)})")
    options = list(question.options)
    letters = list(LETTERS[: len(options)])  # the original letter of each shown option
    nota = nota_letter(options, question.question_id)
    label = question.label
    if transforms.get("remove_correct") and label != nota:
        drop = letters.index(label)
        del options[drop], letters[drop]
        label = nota
    if transforms.get("shuffle_nota"):
        at = letters.index(nota)
        nota_text, _ = options.pop(at), letters.pop(at)
        position = int(draw(seed, question.question_id, setting).integers(len(options) + 1))
        options.insert(position, nota_text)
        letters.insert(position, nota)
    if transforms.get("noise_image"):
        label = nota
    letter_map = dict.fromkeys(LETTERS[: len(question.options)], "")
    letter_map |= {old: LETTERS[i] for i, old in enumerate(letters)}
    return Presented(
        question_id=question.question_id, setting=setting, question=question.question, options=tuple(options),
        label=letter_map[label], nota=letter_map[nota], type=question.type,
        noise_image=bool(transforms.get("noise_image")), letter_map=letter_map,
    )  # fmt: skip


def setting_transforms(setting: Mapping[str, Any]) -> dict[str, Any]:
    """The transforms of a setting's config entry: what `present` does with it, without its label and
    headline (which only name it in the tables) and its template (a file the job reads)."""
    return {key: value for key, value in setting.items() if key in TRANSFORMS}


def shard_of(question_id: str, shards: int) -> int:
    """A question's answer shard, from its id alone: adding questions never moves the others."""
    return int(hashlib.sha256(question_id.encode()).hexdigest()[:8], 16) % shards


def noise_image(question_id: str, seed: int, size: tuple[int, int]) -> Any:
    """Uniform RGB noise for one question: it carries no visual information, so NOTA is the answer."""
    from PIL import Image

    width, height = size
    pixels = draw(seed, question_id, "noise").integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def shown_image(shown: Presented, image_path: str, seed: int) -> Any:
    """The image a question is shown with: its file's, or noise of the same size in a noise setting."""
    image = read_rgb(image_path)
    return noise_image(shown.question_id, seed, image.size) if shown.noise_image else image


# The answer parser. Only capital letters count: "a" is an article, never option A, and neither is
# "A" when a word follows it ("A cat sits ..."). Two different letters make an answer ambiguous.
_MENTION = re.compile(r"(?<![A-Za-z0-9])([A-E])(?![A-Za-z0-9'])")
_ARTICLE = re.compile(r"\s+(?!(?:or|and|nor)\b)[a-z]")
_WHOLE = re.compile(r"^[\s*_`'\"]*\(?\[?([A-E])\]?\)?[\s.:)*_`'\"]*$")
_KEYWORD = re.compile(r"(?i:answer|option|choice)(?:\s+(?i:is))?\s*[:\-]?\s*\(?\[?\*{0,2}([A-E])\b")
_LEADING = re.compile(r"^[\s*_`]*\(?\[?([A-E])(?:[.):\]]|\s*-\s)")
_BRACKETED = re.compile(r"\(([A-E])\)")


def parse_answer(text: str, options: Sequence[str]) -> str | None:
    """The option letter an answer names, or None when it names none or several. Read in order: the
    whole answer is a letter ("E", "E.", "(E)"); "answer/option/choice (is) X"; a leading "E." or
    "(E)" or "E)"; a bracketed "(E)" anywhere; the answer is exactly one option's text."""
    mentioned = {
        m.group(1) for m in _MENTION.finditer(text) if not (m.group(1) == "A" and _ARTICLE.match(text, m.end()))
    }
    if len(mentioned) > 1:
        return None
    for pattern in (_WHOLE, _KEYWORD, _LEADING):
        found = {match.group(1) for match in pattern.finditer(text)}
        if len(found) == 1:
            return _if_offered(found.pop(), options)
        if len(found) > 1:
            return None
    found = set(_BRACKETED.findall(text))
    if len(found) == 1:
        return _if_offered(found.pop(), options)
    if len(found) > 1:
        return None
    said = text.strip().strip("*_`'\"").rstrip(".").strip().lower()
    matches = [LETTERS[i] for i, option in enumerate(options) if option.strip().rstrip(".").lower() == said]
    return matches[0] if len(matches) == 1 else None


def _if_offered(letter: str, options: Sequence[str]) -> str | None:
    return letter if letter in LETTERS[: len(options)] else None


# Metrics. `answers` has one row per shown question: label, nota, prediction (a letter, or empty when
# unparseable) and type. An unparseable answer is wrong and is not NOTA.
def _rate(hits: int, total: int) -> float:
    return hits / total if total else math.nan


def d_prime(hits: int, signals: int, false_alarms: int, noises: int) -> float:
    """Signal-detection sensitivity of NOTA detection, z(hit rate) - z(false-alarm rate). A rate of 0
    or 1 would make it infinite; it is moved half a count inward, to 1/(2N) or 1 - 1/(2N) (Macmillan
    and Kaplan, 1985). Undefined (NaN) without both NOTA and non-NOTA questions."""
    from scipy.stats import norm

    if not signals or not noises:
        return math.nan

    def corrected(count: int, total: int) -> float:
        return min(max(count / total, 1 / (2 * total)), 1 - 1 / (2 * total))

    return float(norm.ppf(corrected(hits, signals)) - norm.ppf(corrected(false_alarms, noises)))


def macro_f1(labels: Sequence[str], predictions: Sequence[str]) -> float:
    """Mean F1 over the letters that are labels or predictions; an unparseable answer ("") is a miss
    of its label's letter and has no F1 of its own."""
    classes = sorted((set(labels) | set(predictions)) - {""})
    scores = []
    for letter in classes:
        tp = sum(lab == letter and pred == letter for lab, pred in zip(labels, predictions, strict=True))
        fp = sum(lab != letter and pred == letter for lab, pred in zip(labels, predictions, strict=True))
        fn = sum(lab == letter and pred != letter for lab, pred in zip(labels, predictions, strict=True))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores)) if scores else math.nan


def humility_metrics(answers: pd.DataFrame) -> dict[str, float]:
    """Every metric of the paper's Table 3 and 7.2, over `answers`, as fractions (not percentages)."""
    correct = answers["prediction"] == answers["label"]
    nota_true = answers["label"] == answers["nota"]
    nota_said = answers["prediction"] == answers["nota"]
    metrics = {
        "questions": float(len(answers)),
        "overall": _rate(int(correct.sum()), len(answers)),
        **{
            t.lower(): _rate(int(correct[answers["type"] == t].sum()), int((answers["type"] == t).sum())) for t in TYPES
        },
        "non_nota_accuracy": _rate(int(correct[~nota_true].sum()), int((~nota_true).sum())),
        "nota_hit": _rate(int(nota_said[nota_true].sum()), int(nota_true.sum())),
        "false_nota": _rate(int(nota_said[~nota_true].sum()), int((~nota_true).sum())),
        "nota_selection": _rate(int(nota_said.sum()), len(answers)),
        "unparseable": _rate(int((answers["prediction"] == "").sum()), len(answers)),
        "macro_f1": macro_f1(list(answers["label"]), list(answers["prediction"])),
        "d_prime": d_prime(
            int(nota_said[nota_true].sum()),
            int(nota_true.sum()),
            int(nota_said[~nota_true].sum()),
            int((~nota_true).sum()),
        ),
    }
    metrics["humility"] = (
        (metrics["nota_hit"] + 1 - metrics["false_nota"]) / 2
        if not (math.isnan(metrics["nota_hit"]) or math.isnan(metrics["false_nota"]))
        else math.nan
    )
    return metrics


def option_token_ids(tokenizer: Any, letters: str = LETTERS) -> list[int]:
    """The token of each option letter as a model's answer begins; each must be one token."""
    ids = []
    for letter in letters:
        encoded = tokenizer.encode(letter, add_special_tokens=False)
        if len(encoded) != 1:
            raise ValueError(f"option letter {letter!r} is {len(encoded)} tokens for this tokenizer; it must be one")
        ids.append(encoded[0])
    return ids


def answer_questions(
    items: Sequence[tuple[Presented, Any]], scorer: Any, templates: Mapping[str, PromptTemplate], max_new_tokens: int
) -> list[dict[str, Any]]:
    """Ask the VLM each (shown question, image). Two readings of each answer: the most probable
    option letter at the first answer position, among the letters shown; and the parsed text (empty
    when it names no option, or several)."""
    letters = option_token_ids(scorer.tokenizer)
    conversations = [image_conversation(templates[shown.setting], **shown.prompt_fields()) for shown, _ in items]
    answers = scorer.choose(conversations, [image for _, image in items], letters, max_new_tokens)
    rows = []
    for (shown, _), (probabilities, text) in zip(items, answers, strict=True):
        offered = probabilities[: len(shown.options)]
        rows.append({
            "question_id": shown.question_id, "setting": shown.setting, "type": shown.type,
            "options": json.dumps(list(shown.options)), "label": shown.label, "nota": shown.nota,
            "letter_map": json.dumps(shown.letter_map, sort_keys=True), "noise_image": shown.noise_image,
            "letter_probabilities": json.dumps(offered), "letter_mass": float(sum(offered)),
            "prediction_logits": LETTERS[int(np.argmax(offered))], "text": text,
            "prediction_text": parse_answer(text, shown.options) or "",
            "template_version": templates[shown.setting].version,
        })  # fmt: skip
    return rows


def answer_in_batches(
    questions: Sequence[tuple[Presented, str]], scorer: Any, templates: Mapping[str, PromptTemplate],
    max_new_tokens: int, seed: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """`answer_questions` for each (shown question, image file), a batch of the scorer's at a time: the
    next batch's images (or their noise) are made while the model answers this one."""
    rows = []
    for batch, images in image_batches(
        questions, scorer.batch_size, lambda question: shown_image(*question, seed), desc=f"answer {scorer.spec.name}"
    ):
        shown = [(presented, image) for (presented, _), image in zip(batch, images, strict=True)]
        rows += answer_questions(shown, scorer, templates, max_new_tokens)
    return rows
