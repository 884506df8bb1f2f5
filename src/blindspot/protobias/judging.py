"""Judge LLMs accept or reject triplets; a triplet is kept only when every judge accepts it."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from blindspot.models.json_output import read_json_output, schema_problem, shorten
from blindspot.models.textgen import TextGenerator
from blindspot.prompts import PromptTemplate
from blindspot.protobias.triplets import count_statuses, generation_provenance
from blindspot.schemas import TRIPLETS

JUDGE_REASONS = ("ok", "malformed", "wrong_domain", "wrong_instance", "more_than_one_change", "no_change", "other")
_EXPLANATION = {"type": "string", "maxLength": 160}
# The schema itself ties the decision to the reason, so no backend can emit an accept with a
# rejection reason; parse_verdict still checks it for outputs made without the schema.
JUDGE_JSON_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "properties": {"decision": {"const": "accept"}, "reason": {"const": "ok"}, "explanation": _EXPLANATION},
            "required": ["decision", "reason", "explanation"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "decision": {"const": "reject"},
                "reason": {"enum": [r for r in JUDGE_REASONS if r != "ok"]},
                "explanation": _EXPLANATION,
            },
            "required": ["decision", "reason", "explanation"],
            "additionalProperties": False,
        },
    ]
}


def parse_verdict(text: str) -> dict[str, Any]:
    """The judge's verdict; a verdict that cannot be read counts as a rejection with a status. Never
    raises, whatever the judge wrote."""
    verdict = {"accept": False, "verdict_reason": "", "explanation": "", "status": "ok", "reason": ""}
    parsed, unreadable = read_json_output(text)
    if unreadable:
        return verdict | {"status": "invalid_json", "reason": unreadable}
    if not isinstance(parsed, dict) or not {"decision", "reason"} <= set(parsed):
        return verdict | {"status": "missing_field", "reason": "needs 'decision' and 'reason'"}
    decision, reason = parsed["decision"], parsed["reason"]
    if decision not in ("accept", "reject") or reason not in JUDGE_REASONS:
        return verdict | {
            "status": "invalid_value",
            "reason": f"decision={shorten(repr(decision), 40)} reason={shorten(repr(reason), 40)}",
        }
    explanation = parsed.get("explanation")
    fits = isinstance(explanation, str) and len(explanation) <= _EXPLANATION["maxLength"]
    verdict |= {"verdict_reason": reason, "explanation": explanation if fits else ""}
    if (decision == "accept") != (reason == "ok"):
        return verdict | {"status": "inconsistent_verdict", "reason": f"'{decision}' with reason '{reason}'"}
    # The branch of the schema for this decision: its problem is the one to name.
    accept_branch, reject_branch = JUDGE_JSON_SCHEMA["anyOf"]
    off_schema = schema_problem(parsed, accept_branch if decision == "accept" else reject_branch)
    if off_schema:  # the explanation missing, not a string or too long, or a field the schema has not
        return verdict | {"status": "schema_violation", "reason": off_schema}
    return verdict | {"accept": decision == "accept"}


def judge_triplets(
    triplets: pd.DataFrame, seeds: pd.DataFrame, judge: TextGenerator, template: PromptTemplate
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Judge every valid triplet of one generator shard; failed generations are not judged."""
    started = time.monotonic()
    valid = triplets[triplets["status"] == "ok"]
    items = valid.merge(seeds, on=["seed_id", "domain"], how="left", validate="one_to_one")
    if items["label"].isna().any():
        raise ValueError("triplets refer to seeds that are not in the seeds table")
    records = items.to_dict("records")
    prompts = [template.render(seed=item, triplet=item) for item in records]
    outputs = judge.generate_json(prompts, JUDGE_JSON_SCHEMA)
    common = generation_provenance(judge, template)
    rows = [
        {
            "triplet_id": item["triplet_id"],
            "domain": item["domain"],
            "generator": item["generator"],
            "judge": judge.spec.name,
            **common,
            "raw_output": output,
            **parse_verdict(output),
        }
        for item, output in zip(records, outputs, strict=True)
    ]
    frame = pd.DataFrame(rows)
    counters = count_statuses(frame, time.monotonic() - started) | {
        "accepted": int(frame["accept"].sum()) if len(frame) else 0
    }
    return frame, counters


def accept_unanimous(
    raw: pd.DataFrame, judgments: pd.DataFrame, seeds: pd.DataFrame, judges: Sequence[str]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Keep the valid triplets that every judge accepted; count what was lost and why."""
    valid = raw[raw["status"] == "ok"]
    verdicts = judgments.pivot_table(index="triplet_id", columns="judge", values="accept", aggfunc="first")
    verdicts = verdicts.reindex(index=valid["triplet_id"], columns=list(judges))
    if verdicts.isna().any().any():
        unjudged = verdicts.isna().sum().to_dict()
        raise ValueError(f"valid triplets without a verdict, per judge: {unjudged}")
    accepted_ids = verdicts.index[verdicts.astype(bool).all(axis=1)]
    kept = valid[valid["triplet_id"].isin(accepted_ids)].merge(
        seeds.drop(columns=["domain"]), on="seed_id", how="left", validate="many_to_one"
    )
    kept = kept.assign(
        generator_model_id=kept["model_id"],
        generate_template_version=kept["template_version"],
        judges=",".join(judges),
    )[TRIPLETS.names].sort_values("triplet_id", ignore_index=True)
    rejections = judgments[~judgments["accept"]]
    counters = {
        "generated": len(raw),
        "generation_failures": _nested_counts(raw[raw["status"] != "ok"], "generator", "status"),
        "valid": len(valid),
        "accepted": len(kept),
        "accepted_per_generator": {k: int(v) for k, v in kept["generator"].value_counts().sort_index().items()},
        "rejections_per_judge": _nested_counts(
            rejections.assign(
                why=rejections["verdict_reason"].where(rejections["status"] == "ok", rejections["status"])
            ),
            "judge",
            "why",
        ),
    }
    return kept, counters


def _nested_counts(frame: pd.DataFrame, outer: str, inner: str) -> dict[str, Mapping[str, int]]:
    return {
        key: {k: int(v) for k, v in group[inner].value_counts().sort_index().items()}
        for key, group in frame.groupby(outer, sort=True)
    }
