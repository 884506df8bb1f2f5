"""The HumbleBench answer parser: the option letter an answer names, or nothing when it names none
or several."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from blindspot.humblebench.reasoning import split_reasoning
from blindspot.humblebench.settings import LETTERS

# Bumped when a change alters what an answer reads as: the tables' rule re-runs on it and reads the
# stored answers again (`metrics.parsed_texts`); the VLMs are not asked again.
# 2: the answer is read after a reasoning model's reasoning. 3: as the official result files show
# answers (tests/data/humblebench_official_rows.jsonl): a letter after punctuation (": B", ", D", ").\n\nA"),
# "letter C", a letter alone on the last line after prose, the last "answer is X" after reasoning that
# names other letters, a leading letter before a lowercase word ("C the middle of the street"), and an
# answer before a lone closing tag ("C</answer>", "E </CONCLUSION>").
PARSER_VERSION = 3

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
_ARTICLE = re.compile(r"[ \t]++(?!(?:or|and|nor|is)\b)[a-z]")
# The whole answer is a letter, in either case, after punctuation or before it: "E", "e.", "(E)", "**B**",
# ": B", ", D", ").\n\nA", '="D' (the official result files hold what a wrapper left of the answer).
_WHOLE = re.compile(r"[\s*_`'\"(\[\uff08:;,.=)\]]*+([A-Ea-e])[\s*_`'\").\]:\uff09\u3002]*+")
# The last line holds a letter alone: "... Therefore, the correct answer is:\n\nD", "information.\n\nB".
_LAST_LINE = re.compile(r"\n[ \t]*+([^\n]++)\s*+$")
# "answer (is) X", and in Chinese "答案是X", "答案" and a colon (ASCII or full-width).
_ANSWER = r"(?:(?i:answer)(?:\s++(?i:is))?+|答案(?:应该|应)?+(?:是|为)?+)[\s:\uff1a\-]*+"
_STATEMENT = re.compile(_ANSWER + _OPEN + _LETTER)
# The same, or "option/choice/letter X", and in Chinese "我选择X".
_KEYWORD = re.compile(
    r"(?:" + _ANSWER + r"|(?:(?i:option|choice|letter)|选择|选项|选)[\s:\uff1a\-]*+)" + _OPEN + _LETTER
)
# A leading letter and then punctuation, a dash, the end of its line or a lowercase word: "E. ...",
# "(D) ...", "B, because ...", "B" and an explanation below it, "C the middle of the street" (an "A"
# before a lowercase word is the article, `_ARTICLE`).
_LEADING = re.compile(
    _OPEN + _LETTER + _CLOSE + r"(?:[.:,)\]\uff09\u3002\uff0c]|[ \t]*+(?:-[ \t]|\n)|(?=[ \t]++[a-z]))"
)
_BRACKETED = re.compile(r"\(([A-E])\)")
# Final-answer markup, as reasoning models write it: "<answer>C</answer>", "\boxed{C}", "\boxed{\text{C}}".
_MARKED = re.compile(r"(?i:<answer>)([^<]*+)(?i:</answer>)|\\boxed\{(?:\\text(?:bf)?+\{)?+([^{}]*+)\}")


def parse_answer(text: str, options: Sequence[str] | Mapping[str, str]) -> str | None:
    """The option letter an answer names, or None when it names none, several, or one not shown.
    `options` are the option texts in letter order, or by letter where the shown letters have a gap.

    A reasoning model's answer is read after its reasoning (`reasoning.split_reasoning`: after
    `</think>`, `<CONCLUSION>`, "final answer is:"; before a lone `</answer>` or `</CONCLUSION>`).
    Final-answer markup (`<answer>C</answer>`, `\\boxed{C}`) is the answer wherever it is, whatever the
    reasoning around it names; its content is read as below. Otherwise, in order: the whole answer is a
    letter ("E", "d", "(E)", ": B"); the conclusion: its last line is a letter alone, or its last
    "answer (is) X" names no other letter after it; an answer that names two different capital letters
    is ambiguous; "answer/option/choice/letter (is) X" or its Chinese forms; a leading "E.", "(E)", "B,",
    "C the ..." or a letter alone on its first line; a bracketed "(E)" anywhere; the answer is exactly
    one option's text."""
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


def _mentioned(prose: str) -> set[str]:
    """The capital letters `prose` names, the article "A" left out."""
    return {m.group(1) for m in _MENTION.finditer(prose) if not (m.group(1) == "A" and _ARTICLE.match(prose, m.end()))}


def _conclusion(text: str, texts: Mapping[str, str]) -> str | None:
    """The letter an answer ends on: its last line is a letter alone, or its last "answer (is) X" is followed
    by no other letter ("Thus, the answer is C." after reasoning that ruled out A, B and D)."""
    last = _LAST_LINE.search(text)
    if last and (alone := _WHOLE.fullmatch(last.group(1))):
        return alone.group(1).upper()
    statements = list(_STATEMENT.finditer(text))
    if statements and not _mentioned(_without_options(text[statements[-1].end() :], texts)):
        return statements[-1].group(1)
    return None


def _read(text: str, texts: Mapping[str, str]) -> str | None:
    whole = _WHOLE.fullmatch(text)
    if whole:
        return _if_offered(whole.group(1).upper(), texts)
    concluded = _conclusion(text, texts)
    if concluded:
        return _if_offered(concluded, texts)
    if len(_mentioned(_without_options(text, texts))) > 1:
        return None
    leading = _LEADING.match(text)
    if leading and leading.group(1) == "A" and _ARTICLE.match(text, leading.end(1)):
        leading = None
    for found in (
        {m.group(1) for m in _KEYWORD.finditer(text)},
        {m.group(1) for m in [leading] if m},
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
