"""Reasoning models write their reasoning before their answer: the answer is read after the marker
that ends the reasoning, the reasoning is kept beside it, and an answer the token budget cut off
(no end of sequence, no marker) is counted.

The markers are data, one table (`MARKERS`): what the paper's reasoning models write, from their chat
templates and from how the official HumbleBench wrappers (github.com/maifoundations/HumbleBench,
`models/`) take their answers. A text is split at the last marker it holds; with none, all of it is
the answer (a model that does not reason, or one cut off while it reasoned), up to a closing tag that
stands alone: the official wrappers cut each answer after its opening tag, so their result files hold
`C</answer>` (GLM-4.1V) and `E </CONCLUSION>` (LLaVA-CoT).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Marker:
    ends: str  # what ends the reasoning; the answer follows it (matched in any case)
    closes: str  # what ends the answer, if anything: it and what follows are left out
    writers: str  # who writes it, and where that is read


MARKERS = (
    Marker(
        "</think>",
        "",
        "R1-Onevision, GLM-4.1V-Thinking, Visionary-R1 (`<think>...</think>`; the official "
        "R1-Onevision and GLM-4.1V wrappers answer after `</think>`), templates that open `<think>`",
    ),
    Marker("\u25c1/think\u25b7", "", "Kimi-VL-Thinking (`\u25c1think\u25b7...\u25c1/think\u25b7`)"),
    Marker(
        "<CONCLUSION>",
        "</CONCLUSION>",
        "LLaVA-CoT (`<SUMMARY>`, `<CAPTION>`, `<REASONING>`, then "
        "`<CONCLUSION>`; the official wrapper answers after `<CONCLUSION>`)",
    ),
    Marker(
        "final answer is:",
        "",
        "Mulberry and R1-VL (their prompts ask for 'The final answer is: xxx'; the "
        "official wrappers answer after 'final answer is:' and 'answer is:')",
    ),
)
# Wrapping inside an answer that says nothing: GLM-4.1V-Thinking boxes its answer,
# `<answer><|begin_of_box|>C<|end_of_box|></answer>`.
DROPPED = ("<|begin_of_box|>", "<|end_of_box|>")
# The final-answer markup the parser reads (`parsing.parse_answer`), opening and closing: a closing tag
# without its opening ends the answer, as a marker's `closes` does.
ANSWER_TAGS = ("<answer>", "</answer>")


@dataclass(frozen=True)
class Split:
    reasoning: str  # the text before the marker ("" with none)
    answer: str  # the text after it, up to the marker's `closes`; all of it with no marker
    closed: bool  # a marker ended the reasoning


def split_reasoning(text: str) -> Split:
    """`text` split at the last marker of `MARKERS` it holds (the latest-starting one, in any case)."""
    folded = text.lower()
    found = max(((folded.rfind(m.ends.lower()), m) for m in MARKERS), key=lambda at: at[0])
    at, marker = found
    if at < 0:
        return Split("", _clean(_before_closing(text)), closed=False)
    answer = text[at + len(marker.ends) :]
    if marker.closes:
        answer = answer[: len(answer) if (end := answer.lower().find(marker.closes.lower())) < 0 else end]
    return Split(text[:at].strip(), _clean(_before_closing(answer)), closed=True)


def _before_closing(text: str) -> str:
    """`text` up to the first closing tag it holds without its opening (a marker's `closes`, or
    `ANSWER_TAGS`), in any case; all of it with none."""
    folded = text.lower()
    tags = [(m.ends, m.closes) for m in MARKERS if m.closes] + [ANSWER_TAGS]
    ends = [
        at
        for opening, closing in tags
        if (at := folded.find(closing.lower())) >= 0 and opening.lower() not in folded[:at]
    ]
    return text[: min(ends)] if ends else text


def _clean(answer: str) -> str:
    for wrapping in DROPPED:
        answer = answer.replace(wrapping, "")
    return answer.strip()


def cut_off(stopped: bool, split: Split) -> bool:
    """Whether the token budget cut the answer off: the generation did not end on its own (no end of
    sequence) and no marker ended its reasoning."""
    return not stopped and not split.closed
