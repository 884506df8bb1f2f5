"""HumbleBench: multiple-choice questions whose options always include "None of the above" (NOTA),
and the six evaluation settings that decide how a question is shown.

A question has five options, A-E, one of which is NOTA (E in the release). A setting turns a question
into what the model is shown (`present`), recording how letters moved; settings are data in config
(`humblebench.settings`): a prompt template and transforms. By default each does what the official
code does (github.com/maifoundations/HumbleBench, `HumbleBench/utils/entity.py` and `io.py`):
- `shuffle_options`: the official shuffle (a later commit's `DataLoader._shuffle_sample_options`): all
  the options are permuted by Python's `random.Random(42 + question_id)`, whatever the run's seed, and
  re-lettered A, B, ...; the map from old to new letters is kept. The project's earlier form,
  `shuffle_nota`, moves NOTA only, to a position drawn from the question id and the seed; the other
  options keep their order (docs/fidelity.md H5).
- `noise_image`: noise replaces the real image. No option is supported any more, so NOTA is the
  answer to hope for, but the label stays the question's, as in the official code and the paper's
  Table 5 (whose noise rows have an Overall apart from the NOTA selection rate, and an HS): these
  settings are read by their NOTA selection rate (docs/fidelity.md H7). Officially one 256x256 grey
  noise image, the same for every question (numpy's global seed 3720, the official
  `set_global_seed`); with `noise_per_question`, RGB noise of the image's size drawn from the
  question id and the seed.
- `remove_correct` (the NOTA-only setting): the correct option is removed, so NOTA becomes the label.
  Officially the other options keep their letters, with a gap ("A, C, D, E"; NOTA stays E); with
  `reletter`, the rest are re-lettered without a gap (NOTA becomes D). A question whose label
  already is NOTA is shown unchanged.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from blindspot.images import read_rgb

LETTERS = "ABCDE"
NOTA_TEXT = "None of the above"
TYPES = ("Object", "Attribute", "Relation")
TRANSFORMS = ("shuffle_options", "shuffle_nota", "noise_image", "noise_per_question", "remove_correct", "reletter")
OFFICIAL_SHUFFLE_SEED = 42  # the official `DataLoader`'s `shuffle_seed`, to which it adds the question id
OFFICIAL_NOISE_SEED = 3720  # the official `set_global_seed` default, in force when it draws its noise image
OFFICIAL_NOISE_SIZE = 256


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
    letters: tuple[str, ...]  # each option's letter as shown: A, C, D, E when the official NOTA-only leaves a gap
    label: str
    nota: str  # the letter of NOTA as shown
    type: str
    noise: str  # "" (the question's image), "official" (one noise image for all) or "per_question"
    letter_map: dict[str, str] = field(default_factory=dict)  # original letter -> shown letter ("" if removed)

    @property
    def noise_image(self) -> bool:
        return bool(self.noise)

    def prompt_fields(self) -> dict[str, str]:
        return {
            "question": self.question,
            "options": lettered(self.options, self.letters),
            "letters": ", ".join(self.letters),
        }


def lettered(options: Sequence[str], letters: Sequence[str] = LETTERS) -> str:
    """Options as a question shows them, one per line: "A. red"."""
    return "\n".join(f"{letter}. {text}" for letter, text in zip(letters, options, strict=False))


def is_nota(text: str) -> bool:
    """Whether an option is NOTA: "None of the above", or "None of above" as some release questions write it."""
    return " ".join(text.strip().rstrip(".").lower().split()) in {NOTA_TEXT.lower(), "none of above"}


def nota_letter(options: Sequence[str], question_id: str = "") -> str:
    found = [LETTERS[i] for i, text in enumerate(options) if is_nota(text)]
    if len(found) != 1:
        raise ValueError(f"question {question_id}: {len(found)} options read '{NOTA_TEXT}' (needs exactly one)")
    return found[0]


def draw(seed: int, *parts: str) -> np.random.Generator:
    """A generator for one question in one setting, the same on every run and machine."""
    digest = hashlib.sha256("\0".join([str(seed), *parts]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def official_order(question_id: str, letters: str) -> list[str]:
    """The original letters in the order the official shuffle shows them: `letters` shuffled in place by
    `random.Random(42 + question_id)`, the release's integer id. An id that is no integer (the project's
    own sources) counts as the first 8 bytes of its sha256, so those questions shuffle too."""
    try:
        number = int(question_id)
    except ValueError:
        number = int.from_bytes(hashlib.sha256(question_id.encode()).digest()[:8], "big")
    order = list(letters)
    random.Random(OFFICIAL_SHUFFLE_SEED + number).shuffle(order)
    return order


def present(question: Question, setting: str, transforms: Mapping[str, Any], seed: int) -> Presented:
    """`question` as the setting named `setting` shows it; `transforms` is the setting's config."""
    unknown = set(transforms) - set(TRANSFORMS) - {"template", "label", "headline"}
    if unknown:
        raise ValueError(f"setting {setting}: unknown keys {sorted(unknown)} (transforms: {', '.join(TRANSFORMS)})")
    for variant, of in (("noise_per_question", "noise_image"), ("reletter", "remove_correct")):
        if transforms.get(variant) and not transforms.get(of):
            raise ValueError(f"setting {setting}: {variant} is a form of {of}, which it does not set")
    if transforms.get("shuffle_options") and transforms.get("shuffle_nota"):
        raise ValueError(f"setting {setting}: shuffle_options and shuffle_nota are two shuffles; set one")
    options = list(question.options)
    letters = list(LETTERS[: len(options)])  # the original letter of each shown option
    places = list(letters)  # the letter each stands at before any re-lettering (the official shuffle's)
    nota = nota_letter(options, question.question_id)
    label = question.label
    if transforms.get("shuffle_options"):  # first, as officially, then NOTA-only's removal with its gap
        letters = official_order(question.question_id, "".join(letters))
        options = [question.options[LETTERS.index(letter)] for letter in letters]
    if transforms.get("remove_correct") and label != nota:
        drop = letters.index(label)
        del options[drop], letters[drop], places[drop]
        label = nota
    if transforms.get("shuffle_nota"):
        at = letters.index(nota)
        nota_text, _ = options.pop(at), letters.pop(at)
        position = int(draw(seed, question.question_id, setting).integers(len(options) + 1))
        options.insert(position, nota_text)
        letters.insert(position, nota)
    # Officially a removed option leaves a gap; a moved NOTA, or the `reletter` form, re-letters A, B, ...
    relettered = transforms.get("shuffle_nota") or transforms.get("reletter")
    shown = LETTERS[: len(options)] if relettered else "".join(places)
    letter_map = dict.fromkeys(LETTERS[: len(question.options)], "")
    letter_map |= dict(zip(letters, shown, strict=True))
    return Presented(
        question_id=question.question_id,
        setting=setting,
        question=question.question,
        options=tuple(options),
        letters=tuple(shown),
        label=letter_map[label],
        nota=letter_map[nota],
        type=question.type,
        noise=noise_kind(transforms),
        letter_map=letter_map,
    )


def noise_kind(transforms: Mapping[str, Any]) -> str:
    """The noise a setting shows instead of the image: "" (none), "official" or "per_question"."""
    if not transforms.get("noise_image"):
        return ""
    return "per_question" if transforms.get("noise_per_question") else "official"


def setting_transforms(setting: Mapping[str, Any]) -> dict[str, Any]:
    """The transforms of a setting's config entry: what `present` does with it, without its label and
    headline (which only name it in the tables) and its template (a file the job reads)."""
    return {key: value for key, value in setting.items() if key in TRANSFORMS}


def noise_image(question_id: str, seed: int, size: tuple[int, int]) -> Any:
    """Uniform RGB noise for one question: it carries no visual information, so NOTA is the answer."""
    from PIL import Image

    width, height = size
    pixels = draw(seed, question_id, "noise").integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


@functools.cache
def official_noise_image() -> Any:
    """The official noise image, pixel for pixel: 256x256 uniform grey noise, numpy's legacy generator
    seeded 3720 (the official `generate_noise_image` right after `set_global_seed`; the same image the
    official repository kept as `.cache/noise_image.png`), as RGB."""
    from PIL import Image

    size = (OFFICIAL_NOISE_SIZE, OFFICIAL_NOISE_SIZE)
    pixels = np.random.RandomState(OFFICIAL_NOISE_SEED).randint(0, 256, size, dtype=np.uint8)
    return Image.fromarray(pixels).convert("RGB")  # 2-D bytes: a grey ("L") image


def shown_image(shown: Presented, image_path: str, seed: int) -> Any:
    """The image a question is shown with: its file's, or, in a noise setting, the official noise image
    or noise of the image's size drawn for the question."""
    if shown.noise == "official":
        return official_noise_image()
    image = read_rgb(image_path)
    return noise_image(shown.question_id, seed, image.size) if shown.noise else image
