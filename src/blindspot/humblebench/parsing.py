"""The HumbleBench answer parser: the option letter an answer names, or nothing when it names none
or several."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from blindspot.humblebench.reasoning import split_reasoning
from blindspot.humblebench.settings import LETTERS

# Bumped when a change alters what an answer reads as: the tables' rule re-runs on it and reads the
# stored answers again (`metrics.parsed_texts`); the VLMs are not asked again.
PARSER_VERSION = 2  # 2: the answer is read after a reasoning model's reasoning

# Every pattern is linear by construction: each quantifier is possessive (`*+`, `++`, `?+`) or takes
# one character, so no run of characters is ever re-split between two quantifiers. (The old keyword
# pattern, `\s+` then `\s*` then `\s*`, tried every split: "answer" and 8,000 spaces took 4 s.)
#
# Only capital letters count inside prose: "a" is an article, never option A, and neither is "A" when
# a word follows it on its line ("A cat sits ..."). Two different letters make an answer ambiguous.
_LETTER = r"([A-E])(?![A-Za-z0-9'])"
_OPEN = r"[\s*_`'\"(\[\uff08]*+"  # markdown, quotes and brackets (ASCII or full-width) before a letter
_CLOSE = r"[*_`'\"]*+"  # markdown and quotes after it
_MENTION = re.compile(r"(?<![A-Za-z0-9])" + _LETTER)
_ARTICLE = re.compile(r"[ \t]++(?!(?:or|and|nor)\b)[a-z]")
# The whole answer is a letter, in either case: "E", "e.", "(E)", "**B**".
_WHOLE = re.compile(_OPEN + r"([A-Ea-e])" + r"[\s*_`'\").\]:\uff09\u3002]*+")
# "answer/option/choice (is) X", and in Chinese "答案是X", "答案" and a colon (ASCII or full-width), "我选择X".
_KEYWORD = re.compile(
    r"(?:(?i:answer|option|choice)(?:\s++(?i:is))?+|答案(?:应该|应)?+(?:是|为)?+|选择|选项|选)[\s:\uff1a\-]*+"
    + _OPEN
    + _LETTER
)
# A leading letter and then punctuation, a dash or the end of its line: "E. ...", "(D) ...", "B, because
# ...", "B" and an explanation below it.
_LEADING = re.compile(_OPEN + _LETTER + _CLOSE + r"(?:[.:,)\]\uff09\u3002\uff0c]|[ \t]*+(?:-[ \t]|\n))")
_BRACKETED = re.compile(r"\(([A-E])\)")
# Final-answer markup, as reasoning models write it: "<answer>C</answer>", "\boxed{C}", "\boxed{\text{C}}".
_MARKED = re.compile(r"(?i:<answer>)([^<]*+)(?i:</answer>)|\\boxed\{(?:\\text(?:bf)?+\{)?+([^{}]*+)\}")


def parse_answer(text: str, options: Sequence[str] | Mapping[str, str]) -> str | None:
    """The option letter an answer names, or None when it names none, several, or one not shown.
    `options` are the option texts in letter order, or by letter where the shown letters have a gap.

    A reasoning model's answer is read after its reasoning (`reasoning.split_reasoning`: after
    `</think>`, `<CONCLUSION>`, "final answer is:"). Final-answer markup (`<answer>C</answer>`,
    `\\boxed{C}`) is the answer wherever it is, whatever the reasoning around it names; its content is
    read as below. Otherwise an answer that names two different capital letters is ambiguous; else, in
    order: the whole answer is a letter ("E", "d", "(E)"); "answer/option/choice (is) X" or its Chinese
    forms; a leading "E.", "(E)", "B," or a letter alone on its first line; a bracketed "(E)" anywhere;
    the answer is exactly one option's text."""
    texts = dict(options) if isinstance(options, Mapping) else dict(zip(LETTERS, options, strict=False))
    text = split_reasoning(text).answer
    marked = [first or second for first, second in _MARKED.findall(text)]
    if marked:
        readings = {_read(content, texts) for content in marked}
        return readings.pop() if len(readings) == 1 else None
    return _read(text, texts)


def _without_options(text: str, texts: Mapping[str, str]) -> str:
    """The answer with the shown options' own texts taken out where they hold a letter that reads as
    one ("C. E-scooter", "D. A cat"): that letter is the option's, not a second letter named. Only
    whole words are taken out, longest option first: an option "on" cut out of "Done" would leave a
    "D" standing alone."""
    options = [option.strip() for option in texts.values() if _MENTION.search(option) and len(option.strip()) > 1]
    for option in sorted(options, key=len, reverse=True):
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(option)}(?![A-Za-z0-9])", " ", text)
    return text


def _read(text: str, texts: Mapping[str, str]) -> str | None:
    prose = _without_options(text, texts)
    mentioned = {
        m.group(1) for m in _MENTION.finditer(prose) if not (m.group(1) == "A" and _ARTICLE.match(prose, m.end()))
    }
    if len(mentioned) > 1:
        return None
    whole = _WHOLE.fullmatch(text)
    if whole:
        return _if_offered(whole.group(1).upper(), texts)
    for found in (
        {m.group(1) for m in _KEYWORD.finditer(text)},
        {m.group(1) for m in [_LEADING.match(text)] if m},
        set(_BRACKETED.findall(text)),
    ):
        if len(found) == 1:
            return _if_offered(found.pop(), texts)
        if len(found) > 1:
            return None
    said = text.strip().strip("*_`'\"").rstrip(".").strip().lower()
    matches = [letter for letter, option in texts.items() if option.strip().rstrip(".").lower() == said]
    return matches[0] if len(matches) == 1 else None


def _if_offered(letter: str, texts: Mapping[str, str]) -> str | None:
    return letter if letter in texts else None
