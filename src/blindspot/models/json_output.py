"""Reading a model's JSON output without ever raising: whatever a model writes (nesting past the
recursion limit, integers past Python's digit limit, repeated keys, NaN, lone surrogates) becomes a
short reason, and what the output's schema refuses is named by its path and rule."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import jsonschema


def shorten(text: str, limit: int = 120) -> str:
    """A reason stays one short line, whatever the model wrote."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object, refusing a repeated key (JSON leaves its meaning open; Python keeps the last)."""
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise ValueError(f"the key {shorten(repr(key), 40)} is repeated")
        value[key] = item
    return value


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")


def read_json_output(text: Any) -> tuple[Any, str]:
    """A model's JSON output as (value, "") or (None, why it cannot be read). Never raises: the text may
    be anything a model writes, including nesting past the recursion limit, integers past Python's
    digit limit, repeated keys, NaN, and lone surrogates (which no parquet file can hold)."""
    if not isinstance(text, str):
        return None, f"expected text, got {type(text).__name__}"
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
        if _SURROGATE.search(text):  # most likely a pair (an emoji); a lone one fails to encode
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except json.JSONDecodeError as error:
        return None, f"not valid JSON: {error.msg} at char {error.pos}"
    except UnicodeEncodeError:
        return None, "not valid JSON: a string holds a lone surrogate (\\ud800-\\udfff)"
    except RecursionError:
        return None, "not valid JSON: nested too deeply"
    except ValueError as error:  # Python's integer digit limit, a repeated key, NaN or Infinity
        return None, f"not valid JSON: {shorten(str(error))}"
    return value, ""


def schema_problem(value: Any, schema: Mapping[str, Any]) -> str:
    """What `schema` refuses in `value` (its path and the keyword it fails), or "" when it conforms.
    Backends decode under the schema; outputs made without it are checked here."""
    try:
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    except RecursionError:
        return "nested too deeply to check against the schema"
    if error is None:
        return ""
    where = "/".join(map(str, error.absolute_path)) or "the output"
    if error.validator == "maxLength":
        return f"{where} has {len(error.instance)} characters, over the schema's maxLength {error.validator_value}"
    return f"{where}: {shorten(error.message)}"
