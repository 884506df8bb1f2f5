"""HumbleBench: multiple-choice questions whose options always include "None of the above" (NOTA),
and the six evaluation settings that decide how a question is shown.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blindspot.images import read_rgb

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
