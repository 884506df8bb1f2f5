"""HumbleBench answering (issue 19): the official repository's evaluation loop against the path the
`answer_humble` step runs, on the tiny Qwen2.5-VL, for the same synthetic questions and noise images.

The peer is github.com/maifoundations/HumbleBench reproduced here (its package is not imported; each
function below names the file it follows): `main.py` walks the questions in `DataLoader` batches of
`--batch_size` and calls `model.infer(batch)`; `models/Qwen25_VL.py`'s `infer` makes one chat per question
(the image, then the release's question text, which holds the lettered options, and
NOT_REASONING_POST_PROMPT), renders them with the chat template, reads the images with
`qwen_vl_utils.process_vision_info`, pads on the left, generates greedily (the model's defaults) up to
128 new tokens, trims and decodes; `HumbleBench/utils/metrics.py`'s `extract_answer` reads the letter.

Where it cannot be the official code word for word:
- Neither arm sends a system message, as the official chat does not; the post prompt is
  `HumbleBench/utils/constant.py`'s, word for word, and the two arms' rendered prompts are checked equal.
- Without qwen_vl_utils installed, the images are opened with PIL as RGB. The images are sized in
  multiples of 28 pixels, at least 56x56, which its `smart_resize` leaves as they are, so both are the same.
- transformers 5 calls `torch_dtype` `dtype`.
- Batch size: the official default of 4 (main.py's `--batch_size`), which is also the tiny preset's
  `humblebench.batch_size`, so both arms pad the same batches; and, as a second row, 1, "one question at
  a time" as the issue words it, whose padding differs from ours. A third row runs the official loop at
  our token budget: the random-weight model never stops early, so at 128 tokens the time is mostly the
  budget, not the path.

Our arm is `answers.answer_shard` in the `original` setting with `load_vlm_scorer`'s scorer, its template,
batch size and max_new_tokens from the tiny preset; it is timed once and stands beside each peer row.
Models are loaded once, outside the timing. Agreement: the two arms render the same prompt text (checked
before timing); greedy decoding is deterministic, so each of our answer texts is a prefix of the
official one (equal at the same budget), both stripped; where both readings name a letter (our parser,
the official `extract_answer`) they are the same letter. The tiny model writes only newlines, so the
texts are empty after stripping and prove little: the row also sets our first answer position's letter
probabilities beside those of a forward pass over the official loop's own batches and inputs (not part
of the official code, which reads text only), close to them, with the same most probable letter.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image
from timing import Row, timed
from tiny_preset import REPO, build_models

from blindspot import schemas
from blindspot.humblebench.answers import answer_shard, option_token_ids
from blindspot.humblebench.questions import question_row, row_question
from blindspot.humblebench.settings import LETTERS, NOTA_TEXT, Question, present, setting_transforms
from blindspot.models.spec import model_spec
from blindspot.models.vlm_scoring import image_conversation, load_vlm_scorer
from blindspot.prompts import PromptTemplate

MODEL = "tiny-qwen2.5-vl"
SETTING = "original"
QUESTIONS = 12
OFFICIAL_MAX_NEW_TOKENS = 128  # models/Qwen25_VL.py
OFFICIAL_BATCH_SIZE = 4  # main.py's --batch_size default
# HumbleBench/utils/constant.py: what models/*.py append to each question
NOT_REASONING_POST_PROMPT = (
    "\nPlease respond with only the letter of the correct choice (A, B, C, D, or E). Do not include the option text "
    "or any other explanation."
)
# Float32 sums in another order (another batch's padding) move a probability by about 1e-6 of itself.
PROBABILITY_RTOL, PROBABILITY_ATOL = 1e-4, 1e-9
# (stem, option pool, type); each question offers four of its pool and NOTA.
STEMS = (
    ("What colour is the car?", ("red", "green", "blue", "yellow", "white", "black"), "Attribute"),
    ("Which animal is in the image?", ("cat", "dog", "horse", "owl", "fox", "goat"), "Object"),
    (
        "Where is the cup relative to the plate?",
        ("left of it", "right of it", "on it", "under it", "behind it"),
        "Relation",
    ),
)
IMAGE_SIZES = ((56, 56), (84, 56), (56, 84))  # multiples of 28 pixels: qwen_vl_utils leaves them unresized
QWEN_VL_UTILS = importlib.util.find_spec("qwen_vl_utils") is not None


def synthetic_questions(folder: Path, n: int, seed: int) -> pd.DataFrame:
    """`n` questions (`schemas.HUMBLE_QUESTIONS` rows), labels cycling through A-E (E is NOTA), each with
    its own noise PNG in `folder`."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        stem, pool, kind = STEMS[i % len(STEMS)]
        options = (*(pool[j] for j in sorted(rng.permutation(len(pool))[:4])), NOTA_TEXT)
        width, height = IMAGE_SIZES[i % len(IMAGE_SIZES)]
        path = folder / f"q{i:02d}.png"
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path)
        question = Question(f"q{i:02d}", stem, options, LETTERS[i % len(LETTERS)], kind)
        rows.append(question_row(question, "benchmark", str(path), {}, verified=True))
    return pd.DataFrame(rows, columns=schemas.HUMBLE_QUESTIONS.names)


def official_samples(questions: pd.DataFrame, transforms: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """The questions as release records (`question` holds the stem and the lettered options, `image` a
    {"path"})."""
    samples = []
    for row in questions.to_dict("records"):
        fields = present(row_question(row), SETTING, transforms, seed).prompt_fields()
        samples.append(
            {
                "question_id": row["question_id"],
                "question": f"{fields['question']}\n{fields['options']}",
                "label": row["label"],
                "type": row["type"],
                "image": {"path": row["image_path"]},
            }
        )
    return samples


def official_messages(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """models/Qwen25_VL.py `infer`'s chat for one question."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": sample["image"]["path"]},
                {"type": "text", "text": sample["question"] + NOT_REASONING_POST_PROMPT},
            ],
        },
    ]


def vision_inputs(messages: list[list[dict[str, Any]]]) -> tuple[list[Any], Any]:
    """qwen_vl_utils `process_vision_info` (images, videos) as models/Qwen25_VL.py calls it; without that
    package, each image file opened with PIL as RGB and no videos."""
    if not QWEN_VL_UTILS:
        images = []
        for message in messages:
            for part in (p for turn in message if isinstance(turn["content"], list) for p in turn["content"]):
                if part["type"] == "image":
                    with Image.open(part["image"]) as image:
                        images.append(image.convert("RGB"))
        return images, None
    from qwen_vl_utils import process_vision_info

    return process_vision_info(messages)


def official_model(path: str) -> tuple[Any, Any]:
    """models/Qwen25_VL.py `Qwen2_5_VL_Model.__init__`: the model in its own dtype, placed by accelerate,
    and its processor padding on the left."""
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(path, dtype="auto", device_map="auto")
    processor = AutoProcessor.from_pretrained(path)
    processor.tokenizer.padding_side = "left"
    return model, processor


def official_inputs(processor: Any, batch: list[dict[str, Any]], device: Any) -> Any:
    """models/Qwen25_VL.py `infer` up to `generate`: one batch's chats rendered, their images read, and
    the processor's padded tensors."""
    messages = [official_messages(sample) for sample in batch]
    texts = [processor.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in messages]
    images, videos = vision_inputs(messages)
    return processor(text=texts, images=images, videos=videos, padding=True, return_tensors="pt").to(device)


def official_infer(
    model: Any, processor: Any, batch: list[dict[str, Any]], max_new_tokens: int
) -> list[dict[str, Any]]:
    """models/Qwen25_VL.py `infer`: one batch generated with the model's generation defaults (greedy here),
    the prompt trimmed off, decoded into each sample's `prediction`."""
    import torch

    inputs = official_inputs(processor, batch, model.device)
    with torch.no_grad():
        generated = model.generate(**inputs, max_new_tokens=max_new_tokens)
    trimmed = [out[len(prompt) :] for prompt, out in zip(inputs.input_ids, generated, strict=True)]
    output = processor.batch_decode(trimmed, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    return [sample | {"prediction": text} for sample, text in zip(batch, output, strict=True)]


def first_position_probabilities(model: Any, processor: Any, batches: Sequence[list[dict[str, Any]]]) -> np.ndarray:
    """Not in the official code, which reads only text: the model's next-token probabilities over the
    option letters at the first answer position, for the official loop's own batches and inputs (one
    forward pass each), to set beside our arm's `letter_probabilities`."""
    import torch

    letters = option_token_ids(processor.tokenizer)
    found = []
    for batch in batches:
        inputs = official_inputs(processor, batch, model.device)
        with torch.no_grad():
            logits = model(**inputs).logits[:, -1].float()  # left padding: the last position answers
        found.append(torch.softmax(logits, dim=-1)[:, letters].cpu().numpy())
    return np.concatenate(found)


def official_batches(samples: Sequence[dict[str, Any]], batch_size: int) -> list[list[dict[str, Any]]]:
    """mcha/utils/entity.py's `DataLoader`: `batch_size` samples at a time, in order."""
    return [list(samples[start : start + batch_size]) for start in range(0, len(samples), batch_size)]


def official_run(samples: Sequence[dict[str, Any]], batch_size: int, infer: Callable[[list], list]) -> list[dict]:
    """main.py's loop: `model.infer(batch)` for each of the `DataLoader`'s batches, the outputs in order."""
    outputs = []
    for batch in official_batches(samples, batch_size):
        outputs += infer(batch)
    return outputs


def official_extract_answer(answer: str) -> str:
    """HumbleBench/utils/metrics.py `extract_answer`: the answer's words (its `tokenize`: lower-cased
    `\\b\\w+\\b`) that are a letter a-e; exactly one is that letter in upper case, otherwise 'NA'."""
    found = set(re.findall(r"\b\w+\b", answer.lower())) & set("abcde")
    return found.pop().upper() if len(found) == 1 else "NA"


def agreement(
    ours: pd.DataFrame, peer: list[dict[str, Any]], probabilities: np.ndarray, same_budget: bool
) -> tuple[bool, str]:
    """Whether the arms agree, and what was compared: each of our texts is a prefix of the peer's (equal to
    it when both generated as many tokens), both stripped; where both readings name a letter, our parsed
    letter is the official `extract_answer`'s; and our first answer position's letter probabilities match
    the official inputs' (`np.allclose`, PROBABILITY_RTOL and _ATOL), with the same most probable letter."""
    if list(ours["question_id"]) != [sample["question_id"] for sample in peer]:
        raise ValueError("the two arms answered different questions or in a different order")
    texts = [sample["prediction"].strip() for sample in peer]
    pairs = list(zip(ours["text"], texts, strict=True))
    matched = [theirs == text if same_budget else theirs.startswith(text) for text, theirs in pairs]
    official = [official_extract_answer(sample["prediction"]) for sample in peer]
    both = [(a, b) for a, b in zip(ours["prediction_text"], official, strict=True) if a and b != "NA"]
    same_letter = sum(a == b for a, b in both)
    mine = np.array([json.loads(row) for row in ours["letter_probabilities"]])
    largest = float(np.max(np.abs(mine - probabilities)))
    close = bool(np.allclose(mine, probabilities, rtol=PROBABILITY_RTOL, atol=PROBABILITY_ATOL))
    argmax_same = int((np.array(list(LETTERS))[probabilities.argmax(axis=1)] == ours["prediction_logits"]).sum())
    detail = (
        f"our text {'equal to' if same_budget else 'a prefix of'} the official for {sum(matched)}/{len(texts)} "
        f"questions ({sum(not text for text, _ in pairs)} of ours empty after stripping); a letter named by our "
        f"parser {int((ours['prediction_text'] != '').sum())}, by extract_answer {sum(b != 'NA' for b in official)}, "
        f"the same for {same_letter}/{len(both)} named by both; first-position letter probabilities (about "
        f"{float(probabilities.mean()):.1e} each) differ by at most {largest:.1e}, most probable letter the same "
        f"for {argmax_same}/{len(texts)}"
    )
    if not all(matched):
        first = matched.index(False)
        detail += (
            f"; first differing {peer[first]['question_id']}: ours {pairs[first][0]!r}, official {texts[first][:60]!r}"
        )
    agree = all(matched) and same_letter == len(both) and close and argmax_same == len(texts)
    return agree, detail


def compare(config: dict[str, Any], repeats: int) -> list[Row]:
    build_models(config, {MODEL})
    humble = config["humblebench"]
    setting = humble["settings"][SETTING]
    template = PromptTemplate.load(REPO / setting["template"])
    spec, seed, ours_tokens = model_spec(config, MODEL), config["seed"], humble["max_new_tokens"]
    transforms = setting_transforms(setting)
    with tempfile.TemporaryDirectory() as scratch:
        questions = synthetic_questions(Path(scratch), QUESTIONS, seed)
        samples = official_samples(questions, transforms, seed)
        scorer = load_vlm_scorer(spec, humble["batch_size"])
        model, processor = official_model(spec.path)
        ours_prompts = [
            scorer.processor.apply_chat_template(
                image_conversation(template, **present(row_question(row), SETTING, transforms, seed).prompt_fields()),
                add_generation_prompt=True,
            )
            for row in questions.to_dict("records")
        ]
        peer_prompts = [
            processor.apply_chat_template(official_messages(s), tokenize=False, add_generation_prompt=True)
            for s in samples
        ]
        if ours_prompts != peer_prompts:
            raise ValueError("the two arms render different prompts; their answers could not be compared")

        def ours() -> pd.DataFrame:
            journal = Path(tempfile.mkdtemp(dir=scratch)) / "answers.journal.jsonl"  # a fresh job's, as the step's
            return answer_shard(
                questions, SETTING, transforms, template, spec, lambda: scorer, ours_tokens, seed, journal
            )[0]

        ours_seconds, answered = timed(ours, repeats)
        vision = "qwen_vl_utils" if QWEN_VL_UTILS else "PIL (qwen_vl_utils is not installed)"
        rows = []
        # The official loop as it runs (128 tokens; batch 4, and 1), and at our token budget, which leaves
        # only the two paths' own costs in the time.
        for batch_size, tokens in (
            (OFFICIAL_BATCH_SIZE, OFFICIAL_MAX_NEW_TOKENS),
            (1, OFFICIAL_MAX_NEW_TOKENS),
            (OFFICIAL_BATCH_SIZE, ours_tokens),
        ):
            infer = functools.partial(official_infer, model, processor, max_new_tokens=tokens)
            peer_seconds, peer = timed(functools.partial(official_run, samples, batch_size, infer), repeats)
            batches = official_batches(samples, batch_size)
            probabilities = first_position_probabilities(model, processor, batches)
            agree, detail = agreement(answered, peer, probabilities, same_budget=tokens == ours_tokens)
            rows.append(
                Row(
                    what=f"HumbleBench answers, {len(samples)} questions",
                    peer=f"official loop, batch {batch_size}, {tokens} tokens",
                    peer_seconds=peer_seconds,
                    ours_seconds=ours_seconds,
                    agree=agree,
                    detail=(
                        f"{detail}; prompts rendered identically; ours: {ours_tokens} new tokens and the letters' "
                        f"logits, batch {humble['batch_size']}; official images read by {vision}"
                    ),
                )
            )
    return rows
