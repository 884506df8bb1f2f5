"""One VLM answering one shard of HumbleBench's questions in every setting it answers (the `answer_humble`
step): which questions are the shard's (whole images: an image's questions are one shard's), how each setting
shows them, and the answers as a table with counters. One job asks every setting, so its model loads once,
and it asks one image's questions in every setting together, so an engine with a prefix cache (vLLM)
encodes the image once for all of them."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from blindspot import schemas
from blindspot.humblebench.humility import image_clusters
from blindspot.humblebench.parsing import parse_answer
from blindspot.humblebench.protocols import conversation, cut_answer, question_seed
from blindspot.humblebench.questions import row_question
from blindspot.humblebench.reasoning import cut_off, split_reasoning
from blindspot.humblebench.settings import LETTERS, Presented, present, shown_image
from blindspot.images import Journaled, journaled_batches
from blindspot.models.spec import ModelSpec
from blindspot.prompts import PromptTemplate
from blindspot.registry import AnswerProtocol, Decoding
from blindspot.shards import shard_of


def question_images(questions: pd.DataFrame) -> list[str]:
    """Each question's image by the name `humility.image_clusters` gives it (its first question's id), which no
    path changes."""
    ids = questions["question_id"].tolist()
    return list(image_clusters(ids, dict(zip(ids, questions["image_path"], strict=True))))


def shard_questions(questions: pd.DataFrame, shard: int, shards: int) -> pd.DataFrame:
    """The questions of answer shard `shard` of `shards`, in the table's order: whole images, each image's shard
    that of its name (`question_images`)."""
    return questions[[shard_of(image, shards) == shard for image in question_images(questions)]]


def answer_shard(
    questions: pd.DataFrame,
    settings: Mapping[str, tuple[Mapping[str, Any], PromptTemplate]],
    spec: ModelSpec,
    load_scorer: Callable[[], Any],
    protocol: AnswerProtocol,
    seed: int,
    journal_path: str | Path,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The answers of the VLM `spec` to `questions` as each of its `settings` (name: its transforms and
    template) shows them (`settings.present`), asked under its `protocol` (`humblebench.protocols`), one row
    per question and setting (`schemas.HUMBLE_ANSWERS`, setting by setting in the questions' order), and
    counters: answers, answers whose text names no option, answers whose two readings agree, answers read
    after a reasoning model's reasoning (`reasoned`), answers the token budget cut off (`cut_off`),
    answers this job computed (`computed_items`: the others came from its journal), and the protocol
    with the decoding it ran (a checkpoint's own, read from it). `load_scorer` is called only for a shard
    with questions, so an empty shard never loads the model. An image's questions are asked in every setting
    one after another (a prefix cache then holds the image for all of them), or, on transformers, whose batches
    pad, in order of their prompts' length; the answers are journaled a batch at a time (`answer_in_batches`)."""
    rows = questions.assign(_image=question_images(questions)).sort_values("_image", kind="stable")
    shown = [
        (present(row_question(row), setting, transforms, seed), row["image_path"])
        for row in rows.to_dict("records")
        for setting, (transforms, _) in settings.items()
    ]
    answered, computed, decoding = [], 0, protocol.decoding
    if shown:
        scorer = load_scorer()
        decoding = protocol.decoding.resolved(getattr(scorer, "generation_config", None))
        templates = {setting: template for setting, (_, template) in settings.items()}
        asked = dataclasses.replace(Asked.load(templates, protocol, seed), decoding=decoding)
        if spec.backend == "transformers":  # a padded batch: prompts of like length together, no prefix cache
            shown.sort(key=lambda item: len(str(asked.conversation(item[0]))))
        answered, computed = answer_in_batches(shown, scorer, asked, journal_path)
    about = {"vlm": spec.name, "model_id": spec.model_id, "model_revision": spec.revision or ""}
    frame = pd.DataFrame([row | about for row in answered], columns=schemas.HUMBLE_ANSWERS.names)
    order = {setting: i for i, setting in enumerate(settings)}
    at = dict(zip(questions["question_id"], range(len(questions)), strict=True))
    frame = frame.iloc[np.lexsort((frame["question_id"].map(at), frame["setting"].map(order)))].reset_index(drop=True)
    counters = {
        "questions": len(questions),
        "answers": len(frame),
        "unparseable_text": int((frame["prediction_text"] == "").sum()),
        "text_and_logits_agree": int((frame["prediction_text"] == frame["prediction_logits"]).sum()),
        "reasoned": int(frame["reasoning"].astype(bool).sum()),
        "cut_off": int(frame["cut_off"].astype(bool).sum()),
        "computed_items": computed,
        "letters_from_text": int(frame["letter_mass"].isna().sum()),  # answers without letter probabilities
        "protocol": protocol.params() | {"decoding": dataclasses.asdict(decoding)},
    }
    return frame, counters


@dataclass(frozen=True)
class Asked:
    """How one job asks its questions: each setting's template, and the protocol's prompt, system message,
    budget and answer cut, with its decoding as it runs (`Decoding.resolved`)."""

    templates: Mapping[str, PromptTemplate]
    prompt: PromptTemplate
    protocol: AnswerProtocol
    decoding: Decoding
    seed: int

    @classmethod
    def load(cls, templates: Mapping[str, PromptTemplate], protocol: AnswerProtocol, seed: int) -> Asked:
        """As a job asks under `protocol`: its prompt file read, its decoding as the protocol says (a
        checkpoint's own, greedy until `Decoding.resolved` reads it)."""
        return cls(templates, PromptTemplate.load(protocol.prompt), protocol, protocol.decoding, seed)

    def conversation(self, shown: Presented) -> list[dict]:
        return conversation(self.templates[shown.setting], self.prompt, self.protocol.system, shown)

    def split(self, generated: str) -> Any:
        """The answer as the protocol cuts it (the official wrapper's cut), else after any reasoning."""
        return (
            cut_answer(generated, self.protocol.answer_after)
            if self.protocol.answer_after
            else split_reasoning(generated)
        )

    def key(self) -> tuple[Any, ...]:
        """What decides the answers, beside the model and the questions: the journal's key."""
        versions = {setting: template.version for setting, template in self.templates.items()}
        protocol = self.protocol.params() | {"decoding": dataclasses.asdict(self.decoding)}
        return versions, self.prompt.version, protocol, self.seed


def option_token_ids(tokenizer: Any, letters: str = LETTERS) -> list[int]:
    """The token of each option letter as a model's answer begins; each must be one token."""
    ids = []
    for letter in letters:
        encoded = tokenizer.encode(letter, add_special_tokens=False)
        if len(encoded) != 1:
            raise ValueError(f"option letter {letter!r} is {len(encoded)} tokens for this tokenizer; it must be one")
        ids.append(encoded[0])
    return ids


def answer_questions(items: Sequence[tuple[Presented, Any]], scorer: Any, asked: Asked) -> list[dict[str, Any]]:
    """Ask the VLM each (shown question, image) as `asked` says. Two readings of each answer: the most
    probable option letter at the first answer position, among the letters shown (the text's letter for
    an API that returns no letter probabilities, `models.api.vlm`); and the parsed text (empty when it
    names no option shown, or several). The text is kept in two parts, what came before the answer (a
    reasoning model's reasoning) and the answer (`Asked.split`), with whether the token budget cut it off
    (`reasoning.cut_off`). A sampled answer is seeded from its question (`protocols.question_seed`)."""
    letters = option_token_ids(scorer.tokenizer)
    conversations = [asked.conversation(shown) for shown, _ in items]
    seeds = [question_seed(asked.seed, shown.question_id, shown.setting) for shown, _ in items]
    answers = scorer.choose(
        conversations, [image for _, image in items], letters, asked.protocol.max_tokens, asked.decoding, seeds
    )
    rows = []
    for (shown, _), (probabilities, generated, stopped) in zip(items, answers, strict=True):
        offered = [probabilities[LETTERS.index(letter)] for letter in shown.letters]
        split = asked.split(generated)
        text = split.answer
        from_text = parse_answer(text, dict(zip(shown.letters, shown.options, strict=True))) or ""
        # An API without logprobs has no letter distribution (NaN): its letter reading is the text's.
        has_letters = bool(np.isfinite(offered).all())
        rows.append(
            {
                "question_id": shown.question_id,
                "setting": shown.setting,
                "type": shown.type,
                "options": json.dumps(list(shown.options)),
                "label": shown.label,
                "nota": shown.nota,
                "letter_map": json.dumps(shown.letter_map, sort_keys=True),
                "noise_image": shown.noise_image,
                "letter_probabilities": json.dumps([p if has_letters else None for p in offered]),
                "letter_mass": float(sum(offered)),
                "prediction_logits": shown.letters[int(np.argmax(offered))] if has_letters else from_text,
                "text": text,
                "prediction_text": from_text,
                "reasoning": split.reasoning,
                "stopped": bool(stopped),
                "cut_off": cut_off(stopped, split),
                "template_version": asked.templates[shown.setting].version,
                "prompt_version": asked.prompt.version,
                "protocol": asked.protocol.name,
            }
        )
    return rows


def answer_in_batches(
    questions: Sequence[tuple[Presented, str]], scorer: Any, asked: Asked, journal_path: str | Path
) -> Journaled:
    """`answer_questions` for each (shown question, image file), a batch of the scorer's at a time: the
    next batch's images (or their noise) are made while the model answers this one. Each batch's
    answers go to the journal at `journal_path` (`images.journaled_batches`): a job killed midway
    answers only the batches it had not finished."""

    def answer(batch: list[tuple[Presented, str]], images: list[Any]) -> list[dict[str, Any]]:
        shown = [(presented, image) for (presented, _), image in zip(batch, images, strict=True)]
        return answer_questions(shown, scorer, asked)

    spec = scorer.spec
    key = ("answers", spec.outputs, *asked.key(), "protocol")  # rows with the protocol
    return journaled_batches(
        questions,
        scorer.batch_size,
        lambda question: shown_image(*question, asked.seed),
        answer,
        journal_path,
        key,
        desc=f"answer {spec.name}",
    )
