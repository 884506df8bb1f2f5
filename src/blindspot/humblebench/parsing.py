"""The HumbleBench answer parser: the option letter an answer names, or nothing when it names none
or several."""

from __future__ import annotations

import re
from collections.abc import Sequence

from blindspot.humblebench.settings import LETTERS

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
