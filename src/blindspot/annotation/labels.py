"""People's labels on the annotation projects (`blindspot.annotation.projects`), read back from Label
Studio's JSON export, which both Label Studio and the built-in page (`blindspot.annotation.server`)
write: checked against each task's label config, one per annotator and item, and turned into what the
studies use (a pair's corr/adv/neither, an image's mean score). `label_studio_export` writes labels
back in that format, for importing into a Label Studio project.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot.annotation.projects import CONTROLS, PAIR_CHOICES, label_studio_tasks
from blindspot.humblebench.questions import DECISIONS
from blindspot.humblebench.settings import LETTERS


def _annotator(annotation: Mapping[str, Any]) -> str:
    """The annotator's blindspot name (`annotator`, written by `label_studio_export` and by a pull),
    else the Label Studio user's email or id."""
    who = annotation.get("completed_by")
    if isinstance(who, Mapping):
        return str(who.get("annotator") or who.get("email") or who.get("id"))
    return str(who)


def _one_choice(value: Any, allowed: Sequence[str], where: str) -> str:
    choices = value.get("choices") if isinstance(value, Mapping) else None
    if not isinstance(choices, list) or len(choices) != 1 or choices[0] not in allowed:
        raise ValueError(f"{where}: {choices!r} is not one of {', '.join(allowed)}")
    return choices[0]


def _value(task: str, results: Sequence[Mapping[str, Any]], where: str) -> dict[str, Any]:
    """The label in an annotation's results, checked against the task's label config: a ValueError
    naming `where` and the value for anything the config cannot give, and for results without the
    task's control (an empty or partial annotation, which Label Studio saves when a project allows
    empty annotations), so no annotation is dropped unseen."""
    if not isinstance(results, list) or not all(isinstance(r, Mapping) and "from_name" in r for r in results):
        raise ValueError(f"{where}: the result is not a list of Label Studio results")
    named = {result["from_name"]: result.get("value") for result in results}
    control = CONTROLS[task]
    if control not in named:
        raise ValueError(
            f"{where}: no {control!r} among the results ({', '.join(map(str, named)) or 'none'}): an empty or "
            "partial annotation; have it finished, or skipped, in Label Studio"
        )
    if task == "image_score":
        score = named["score"].get("rating") if isinstance(named["score"], Mapping) else None
        if type(score) is not int or not 1 <= score <= 10:
            raise ValueError(f"{where}: score {score!r} is not a whole number from 1 to 10")
        return {"score": score}
    if task == "pairwise":
        return {"choice": _one_choice(named["choice"], PAIR_CHOICES, where)}
    if task == "humble_answer":
        return {"answer": _one_choice(named["answer"], LETTERS, where)}
    decision = _one_choice(named["decision"], DECISIONS, where)
    edit = named.get("edit") or {"text": [""]}
    text = edit.get("text") if isinstance(edit, Mapping) else None
    if not isinstance(text, list) or not all(isinstance(line, str) for line in text):
        raise ValueError(f"{where}: edit {text!r} is not a list of texts")
    return {"decision": decision, "edit": "\n".join(text)}


def _time(annotation: Mapping[str, Any], field: str, where: str) -> pd.Timestamp:
    """An annotation's `created_at` or `updated_at` in UTC (Label Studio writes "...Z", the built-in
    page "...+00:00"); NaT when absent."""
    text = annotation.get(field)
    if not text:
        return pd.NaT
    try:
        return pd.to_datetime(text, utc=True)
    except ValueError:
        raise ValueError(f"{where}: {field} {text!r} is not a timestamp") from None


def read_labels(task: str, export: str | Path) -> pd.DataFrame:
    """Labels from a Label Studio JSON export file (or the built-in page's, the same format):
    `labels_from_export`."""
    try:
        tasks = json.loads(Path(export).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{export} is not a JSON export (Label Studio's JSON, not its CSV): {error}") from None
    return labels_from_export(task, tasks, export)


def labels_from_export(task: str, tasks: Sequence[Mapping[str, Any]], source: str | Path) -> pd.DataFrame:
    """Labels from Label Studio's JSON export (`tasks`, read from `source`): one row per annotator and
    item with its value, in export order. Of several annotations by one annotator on one item the
    latest is kept: by `updated_at`, then `created_at`, then the annotation's integer `id` (whichever
    the export has; one without them counts as older, ties keep export order), since Label Studio's
    export has no order. Cancelled (skipped) annotations are left out; any other without a value the
    task's label config can give (none at all, a choice "both", a score of 11) is a ValueError naming
    `source`, the task, its annotator and the value. Label Studio's JSON-MIN export is refused."""
    rows = []
    for number, entry in enumerate(tasks, start=1):
        if isinstance(entry, Mapping) and "item_id" in entry and "data" not in entry:
            raise ValueError(
                f"{source}: a JSON-MIN export (task {number} has item_id at the top, no data or annotations): "
                "export JSON from Label Studio, or use `blindspot annotate pull`"
            )
        item = entry.get("data", {}).get("item_id") if isinstance(entry, Mapping) else None
        if not isinstance(item, str):
            raise ValueError(f"{source}: task {number} has no data.item_id")
        which = f"task {item}" + (f" (Label Studio task {entry['id']})" if "id" in entry else "")
        annotations = entry.get("annotations") or []
        if not isinstance(annotations, list) or not all(isinstance(a, Mapping) for a in annotations):
            raise ValueError(f"{source}: {which}'s annotations are not a list of Label Studio annotations")
        for annotation in annotations:
            if annotation.get("was_cancelled"):
                continue
            who = _annotator(annotation)
            where = f"{source}: {which} by {who}"
            owner = entry.get("data", {}).get("annotator")
            if owner is not None and owner != who:  # an item of one person's set (humble_answer)
                raise ValueError(f"{where}: the item is {owner}'s, not theirs")
            order = {field: _time(annotation, field, where) for field in ("updated_at", "created_at")}
            annotation_id = annotation.get("id")
            rows.append(
                {
                    "annotator": who,
                    "item_id": item,
                    **_value(task, annotation.get("result", []), where),
                    **order,
                    "id": annotation_id if isinstance(annotation_id, int) else None,
                }
            )
    values = {
        "image_score": ["score"],
        "pairwise": ["choice"],
        "question_check": ["decision", "edit"],
        "humble_answer": ["answer"],
    }[task]
    columns = ["annotator", "item_id", *values]
    frame = pd.DataFrame(rows, columns=[*columns, "updated_at", "created_at", "id"])
    latest = frame.sort_values(["updated_at", "created_at", "id"], kind="stable", na_position="first")
    return latest.drop_duplicates(["annotator", "item_id"], keep="last").sort_index()[columns].reset_index(drop=True)


def pairwise_choices(labels: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Left/right/neither turned into corr/adv/neither with each pair's recorded order; any other
    choice is a ValueError naming the pair and the choice."""
    left_role = pairs.set_index("pair_id")["left_role"]
    unknown = set(labels["item_id"]) - set(left_role.index)
    if unknown:
        raise ValueError(f"labels for pairs that are not in the subset: {', '.join(sorted(unknown)[:5])}")
    strange = labels[~labels["choice"].isin(PAIR_CHOICES)]
    if len(strange):
        row = strange.iloc[0]
        raise ValueError(f"pair {row['item_id']}: choice {row['choice']!r} is not one of {', '.join(PAIR_CHOICES)}")
    other = {"corr": "adv", "adv": "corr"}

    def role(row: Any) -> str:
        if row.choice == "neither":
            return "neither"
        left = left_role[row.item_id]
        return left if row.choice == "left" else other[left]

    return pd.DataFrame(
        {
            "annotator": labels["annotator"],
            "pair_id": labels["item_id"],
            "choice": [role(r) for r in labels.itertuples(index=False)],
        }
    )


def scored_images(labels: pd.DataFrame, images: pd.DataFrame, source: str | Path) -> pd.DataFrame:
    """The filter validation images people scored (`read_labels("image_score", ...)` from the file
    `source`), each with its annotators' mean score as `human_score`. A score for an image outside the
    subset is an error."""
    unknown = set(labels["item_id"]) - set(images["image_id"])
    if unknown:
        raise ValueError(f"{source}: scores for images outside the filter validation subset: {sorted(unknown)[:5]}")
    human = labels.groupby("item_id")["score"].mean()
    return images[images["image_id"].isin(human.index)].assign(human_score=lambda f: f["image_id"].map(human))


def label_studio_export(
    project: Mapping[str, Any], labels: pd.DataFrame, emails: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Labels (annotator, item_id, value fields) as Label Studio tasks with annotations, importable into
    the project's Label Studio project: each task's full data (`label_studio_tasks`), each annotation
    `completed_by` its annotator's Label Studio email (`emails` maps a name to it; by default the name
    itself) and, for `read_labels`, the blindspot name as `annotator`."""
    task = project["task"]
    emails = emails or {}
    by_item: dict[str, list[dict[str, Any]]] = {}
    for row in labels.to_dict("records"):
        if task == "image_score":
            result = [
                {"from_name": "score", "to_name": "image", "type": "rating", "value": {"rating": int(row["score"])}}
            ]
        elif task == "humble_answer":
            result = [
                {"from_name": "answer", "to_name": "question", "type": "choices", "value": {"choices": [row["answer"]]}}
            ]
        elif task == "pairwise":
            result = [
                {"from_name": "choice", "to_name": "prompt", "type": "choices", "value": {"choices": [row["choice"]]}}
            ]
        else:
            result = [
                {
                    "from_name": "decision",
                    "to_name": "question",
                    "type": "choices",
                    "value": {"choices": [row["decision"]]},
                },
                {
                    "from_name": "edit",
                    "to_name": "question",
                    "type": "textarea",
                    "value": {"text": [row.get("edit") or ""]},
                },
            ]
        name = row["annotator"]
        by_item.setdefault(row["item_id"], []).append(
            {
                "completed_by": {"email": emails.get(name, name), "annotator": name},
                "result": result,
                "was_cancelled": False,
                "created_at": row.get("created_at", ""),
            }
        )
    return [
        {**entry, "annotations": by_item.get(entry["data"]["item_id"], [])} for entry in label_studio_tasks(project)
    ]


def read_human_answers(path: str | Path, study: str | Path | None = None) -> pd.DataFrame:
    """Table 7's human answers (`schemas.HUMAN_ANSWERS`) from a CSV (`annotator,question_id,setting,answer`)
    or from the `humble_answer` project's labels (Label Studio's JSON export, the built-in page's too),
    checked against the annotators' question sets (`study`, the human study table) when given."""
    from blindspot import schemas
    from blindspot.humblebench.human_study import answers_from_labels
    from blindspot.humblebench.tables import read_human_answers as read_csv_answers
    from blindspot.io import read_table

    if Path(path).suffix != ".json":
        return read_csv_answers(path)
    sets = read_table(study, schemas.HUMAN_STUDY) if study else None
    return answers_from_labels(read_labels("humble_answer", path), sets, str(path))
