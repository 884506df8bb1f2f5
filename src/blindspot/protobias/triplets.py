"""Generate (T, D_c, D_a) triplets with an LLM and validate what it wrote, row by row."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from blindspot.io import stable_id
from blindspot.models.json_output import read_json_output, schema_problem
from blindspot.models.textgen import TextGenerator
from blindspot.prompts import PromptTemplate

TRIPLET_FIELDS = ("neutral_prompt", "correct_description", "adversarial_description")
TRIPLET_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    # Image prompts stay short: T2I text encoders (CLIP) read 77 tokens.
    "properties": {name: {"type": "string", "minLength": 1, "maxLength": 300} for name in TRIPLET_FIELDS},
    "required": list(TRIPLET_FIELDS),
    "additionalProperties": False,
}

# Why a generated triplet is not kept. Every failed row carries one of these as its status.
FAILURE_REASONS = (
    "invalid_json",  # not parseable as JSON, or not a JSON object
    "missing_field",  # a required field is absent, empty or not a string
    "schema_violation",  # refused by TRIPLET_JSON_SCHEMA otherwise (a field too long, an extra field)
    "instance_in_neutral_prompt",  # T names a specific subject instead of the broad category
    "label_missing",  # T does not name the broad category
    "wrong_instance",  # D_c or D_a does not show its subject, or shows the other one
    "knob_not_applied",  # the controlled value is absent where it must appear
)


class ShardFailedError(RuntimeError):
    """Every row of a shard failed: an empty success would hide a broken model or prompt."""


@dataclass(frozen=True)
class Validation:
    status: str  # "ok" or one of FAILURE_REASONS
    reason: str
    fields: dict[str, str]


def mentions(text: str, phrase: str) -> bool:
    """Whether `text` names `phrase` as whole words (case-insensitive, plural -s/-es allowed)."""
    words = r"\s+".join(re.escape(word) for word in phrase.split())
    return re.search(rf"(?<![\w-]){words}(?:s|es)?(?![\w-])", text, flags=re.IGNORECASE) is not None


def _fail(status: str, reason: str, fields: dict[str, str] | None = None) -> Validation:
    return Validation(status, reason, fields or dict.fromkeys(TRIPLET_FIELDS, ""))


def validate_triplet(text: str, seed: Mapping[str, Any]) -> Validation:
    """Check one LLM output against its seed. Never raises: failures are returned with a reason."""
    parsed, unreadable = read_json_output(text)
    if unreadable:
        return _fail("invalid_json", unreadable)
    if not isinstance(parsed, dict):
        return _fail("invalid_json", f"expected a JSON object, got {type(parsed).__name__}")
    bad = [name for name in TRIPLET_FIELDS if not isinstance(parsed.get(name), str) or not parsed[name].strip()]
    if bad:
        return _fail("missing_field", f"missing or empty: {', '.join(bad)}")
    off_schema = schema_problem(parsed, TRIPLET_JSON_SCHEMA)
    if off_schema:
        return _fail("schema_violation", off_schema)
    fields = {name: " ".join(parsed[name].split()) for name in TRIPLET_FIELDS}
    t, dc, da = fields["neutral_prompt"], fields["correct_description"], fields["adversarial_description"]
    correct, adversarial = seed["correct_instance"], seed["adversarial_instance"]
    named = [name for name in (correct, adversarial) if mentions(t, name)]
    if named:
        return _fail("instance_in_neutral_prompt", f"T names {', '.join(named)}", fields)
    if not mentions(t, seed["label"]):
        return _fail("label_missing", f"T does not name the category '{seed['label']}'", fields)
    if not mentions(dc, correct) or mentions(dc, adversarial):
        return _fail("wrong_instance", f"D_c must show '{correct}' and not '{adversarial}'", fields)
    if not mentions(da, adversarial) or mentions(da, correct):
        return _fail("wrong_instance", f"D_a must show '{adversarial}' and not '{correct}'", fields)
    for name, text_, value in (("T", t, seed["correct_value"]), ("D_c", dc, seed["correct_value"])):
        if not mentions(text_, value):
            return _fail("knob_not_applied", f"{name} lacks the correct value '{value}'", fields)
    if not mentions(da, seed["adversarial_value"]):
        return _fail("knob_not_applied", f"D_a lacks the adversarial value '{seed['adversarial_value']}'", fields)
    return Validation("ok", "", fields)


def generation_provenance(generator: TextGenerator, template: PromptTemplate) -> dict[str, Any]:
    spec = generator.spec
    return {
        "model": spec.name,
        "model_id": spec.model_id,
        "model_revision": spec.revision or "",
        "template_version": template.version,
        "sampling": json.dumps(generator.sampling(), sort_keys=True),
    }


def count_statuses(frame: pd.DataFrame, seconds: float) -> dict[str, Any]:
    statuses = Counter(frame["status"])
    return {
        "rows": len(frame),
        "ok": statuses.pop("ok", 0),
        "failed": dict(sorted(statuses.items())),
        "seconds": round(seconds, 3),
    }


def raise_if_all_failed(frame: pd.DataFrame, counters: dict[str, Any], what: str) -> None:
    if len(frame) and counters["ok"] == 0:
        examples = frame[["status", "reason", "raw_output"]].drop_duplicates("status").head(3).to_dict("records")
        raise ShardFailedError(
            f"{what}: all {len(frame)} rows failed ({counters['failed']}); first reasons: {examples}. "
            "Check the model, its chat template and the prompt template."
        )


def generate_triplets(
    seeds: pd.DataFrame, generator: TextGenerator, template: PromptTemplate
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Write one triplet per seed; return the rows (failed ones included) and the counters."""
    started = time.monotonic()
    records = seeds.to_dict("records")
    outputs = generator.generate_json([template.render(seed=seed) for seed in records], TRIPLET_JSON_SCHEMA)
    common = generation_provenance(generator, template)
    rows = []
    for seed, output in zip(records, outputs, strict=True):
        checked = validate_triplet(output, seed)
        rows.append(
            {
                "triplet_id": stable_id(seed["seed_id"], common),
                "seed_id": seed["seed_id"],
                "domain": seed["domain"],
                "generator": generator.spec.name,
                **checked.fields,
                **common,
                "raw_output": output,
                "status": checked.status,
                "reason": checked.reason,
            }
        )
    frame = pd.DataFrame(rows)
    counters = count_statuses(frame, time.monotonic() - started)
    return frame, counters
