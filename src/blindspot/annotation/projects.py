"""Human annotation: projects for the three tasks of the papers, as Label Studio projects and for the
built-in annotation page (`blindspot.annotation.server`), and the import of their labels.

Tasks:
- `image_score`: an image against its own description, 1-10 with the VLM filter's rubric
  (ProtoBias's filter validation, from `benchmark/annotation/filter_validation.parquet`).
- `pairwise`: the neutral prompt and the two images of a test pair in the left/right order drawn when
  the subset was made; left, right or neither (`preference_pairs.parquet`). Imports map left/right back
  to corr/adv.
- `question_check`: a HumbleBench question with its options and label: keep, modify (with the
  edited question, options and label) or delete (a questions table, e.g. the scene-graph candidates).

A project folder holds `project.json` (task, items, annotators and their tokens), Label Studio's
`tasks.json` and `label_config.xml`. Both tools export labels in Label Studio's JSON export format,
which `read_labels` reads.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot.humblebench.settings import lettered
from blindspot.io import write_json, write_text

TASKS = ("image_score", "pairwise", "question_check")
PAIR_CHOICES = ("left", "right", "neither")

LABEL_CONFIGS = {
    "image_score": """<View>
  <Header value="Score how well the image matches its description (1 = not at all, 10 = every detail)"/>
  <Image name="image" value="$image"/>
  <Text name="description" value="$description"/>
  <Rating name="score" toName="image" maxRating="10" icon="star" size="medium"/>
</View>
""",
    "pairwise": """<View>
  <Header value="Which image matches the prompt? Judge only its stated details, not which image is more typical"/>
  <Text name="prompt" value="$prompt"/>
  <Image name="left" value="$left_image"/>
  <Image name="right" value="$right_image"/>
  <Choices name="choice" toName="prompt" choice="single" showInline="true">
    <Choice value="left"/>
    <Choice value="right"/>
    <Choice value="neither"/>
  </Choices>
</View>
""",
    "question_check": """<View>
  <Header value="Is the question answerable from the image, with exactly the labelled option correct?"/>
  <Image name="image" value="$image"/>
  <Text name="question" value="$question"/>
  <Text name="options" value="$options"/>
  <Text name="label" value="$label"/>
  <Choices name="decision" toName="question" choice="single" showInline="true">
    <Choice value="keep"/>
    <Choice value="modify"/>
    <Choice value="delete"/>
  </Choices>
  <TextArea name="edit" toName="question" placeholder='For modify: {"question": ..., "options": [...], "label": "A"}'/>
</View>
""",
}


def task_items(task: str, table: pd.DataFrame) -> list[dict[str, Any]]:
    """The items of a task from its table: an id, the image files it shows, and the text fields."""
    if task == "image_score":
        return [{"id": r.image_id, "images": {"image": r.path}, "description": r.description}
                for r in table.itertuples(index=False)]  # fmt: skip
    if task == "pairwise":
        return [
            {"id": r.pair_id, "images": {"left_image": r.left_path, "right_image": r.right_path},
             "prompt": r.neutral_prompt, "left_role": r.left_role}
            for r in table.itertuples(index=False)
        ]  # fmt: skip
    if task == "question_check":
        return [
            {"id": r.question_id, "images": {"image": r.image_path}, "question": r.question,
             "options": lettered(json.loads(r.options)),
             "label": r.label}
            for r in table.itertuples(index=False)
        ]  # fmt: skip
    raise ValueError(f"unknown task {task!r} (tasks: {', '.join(TASKS)})")


def make_project(
    task: str, table: pd.DataFrame, annotators: Sequence[str], folder: str | Path, image_url_prefix: str,
    image_root: str | Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Write a project folder: `project.json` (with a secret token per annotator, for the built-in
    page), and Label Studio's `tasks.json` and `label_config.xml`. Label Studio shows local images
    through a URL: `image_url_prefix` + the image's path relative to `image_root` (with local-file
    serving, "/data/local-files/?d=", and LOCAL_FILES_DOCUMENT_ROOT set to `image_root`). Without an
    `image_root`, the deepest folder above every image is used; `project.json` records it. A table
    without rows makes a project without items."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r} (tasks: {', '.join(TASKS)})")
    if len(set(annotators)) != len(annotators) or not annotators:
        raise ValueError("annotators must be one or more distinct names")
    folder = Path(folder)
    items = task_items(task, table)
    images = [Path(path).resolve() for item in items for path in item["images"].values()]
    if image_root is not None:
        root = Path(image_root).resolve()
    else:  # an empty project (no candidates, say) shows no image: any root will do
        root = Path(os.path.commonpath([p.parent for p in images])) if images else folder.resolve()
    outside = [path for path in images if not path.is_relative_to(root)]
    if outside:
        raise ValueError(f"image {outside[0]} is not under the image root {root}")
    project = {"task": task, "items": items, "image_root": str(root),
               "annotators": {name: secrets.token_urlsafe(16) for name in annotators}}  # fmt: skip
    tasks = [
        {"id": index + 1, "data": {"item_id": item["id"],
                                   **{k: v for k, v in item.items() if k not in ("id", "images", "left_role")},
                                   **{field: image_url_prefix + str(Path(path).resolve().relative_to(root))
                                      for field, path in item["images"].items()}}}
        for index, item in enumerate(items)
    ]  # fmt: skip
    write_json(folder / "project.json", project)
    write_json(folder / "tasks.json", tasks)
    write_text(folder / "label_config.xml", LABEL_CONFIGS[task])
    return project


def make_projects(
    sources: Mapping[str, pd.DataFrame], annotators: Sequence[str], folder: str | Path, image_url_prefix: str
) -> dict[str, dict[str, Any]]:
    """A project per task (`make_project`), each in its own folder under `folder` named like the task;
    `sources` maps a task to its table."""
    return {
        task: make_project(task, table, annotators, Path(folder) / task, image_url_prefix)
        for task, table in sources.items()
    }


def load_project(folder: str | Path) -> dict[str, Any]:
    return json.loads((Path(folder) / "project.json").read_text())


def _annotator(annotation: Mapping[str, Any]) -> str:
    who = annotation.get("completed_by")
    if isinstance(who, Mapping):
        return str(who.get("email") or who.get("id"))
    return str(who)


def _value(task: str, results: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The label in an annotation's results: None when it holds none (skipped)."""
    named = {result["from_name"]: result["value"] for result in results}
    if task == "image_score" and "score" in named:
        return {"score": int(named["score"]["rating"])}
    if task == "pairwise" and "choice" in named:
        return {"choice": named["choice"]["choices"][0]}
    if task == "question_check" and "decision" in named:
        edit = named.get("edit", {}).get("text", [""])
        return {"decision": named["decision"]["choices"][0], "edit": edit[0] if edit else ""}
    return None


def read_labels(task: str, export: str | Path) -> pd.DataFrame:
    """Labels from a Label Studio JSON export (or the built-in page's, the same format): one row per
    annotator and item with its value, the last annotation of each kept. Cancelled (skipped)
    annotations are left out."""
    tasks = json.loads(Path(export).read_text())
    rows = []
    for entry in tasks:
        item = entry["data"]["item_id"]
        for annotation in entry.get("annotations", []):
            if annotation.get("was_cancelled"):
                continue
            value = _value(task, annotation.get("result", []))
            if value is not None:
                rows.append({"annotator": _annotator(annotation), "item_id": item, **value})
    columns = {"image_score": ["score"], "pairwise": ["choice"], "question_check": ["decision", "edit"]}[task]
    frame = pd.DataFrame(rows, columns=["annotator", "item_id", *columns])
    return frame.drop_duplicates(["annotator", "item_id"], keep="last").reset_index(drop=True)


def pairwise_choices(labels: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Left/right/neither turned into corr/adv/neither with each pair's recorded order."""
    left_role = pairs.set_index("pair_id")["left_role"]
    unknown = set(labels["item_id"]) - set(left_role.index)
    if unknown:
        raise ValueError(f"labels for pairs that are not in the subset: {', '.join(sorted(unknown)[:5])}")
    other = {"corr": "adv", "adv": "corr"}

    def role(row: Any) -> str:
        if row.choice == "neither":
            return "neither"
        left = left_role[row.item_id]
        return left if row.choice == "left" else other[left]

    return pd.DataFrame({"annotator": labels["annotator"], "pair_id": labels["item_id"],
                         "choice": [role(r) for r in labels.itertuples(index=False)]})  # fmt: skip


def scored_images(labels: pd.DataFrame, images: pd.DataFrame, source: str | Path) -> pd.DataFrame:
    """The filter validation images people scored (`read_labels("image_score", ...)` from the file
    `source`), each with its annotators' mean score as `human_score`. A score for an image outside the
    subset is an error."""
    unknown = set(labels["item_id"]) - set(images["image_id"])
    if unknown:
        raise ValueError(f"{source}: scores for images outside the filter validation subset: {sorted(unknown)[:5]}")
    human = labels.groupby("item_id")["score"].mean()
    return images[images["image_id"].isin(human.index)].assign(human_score=lambda f: f["image_id"].map(human))


def label_studio_export(project: Mapping[str, Any], labels: pd.DataFrame) -> list[dict[str, Any]]:
    """Labels (annotator, item_id, value fields) in Label Studio's JSON export format."""
    task = project["task"]
    by_item: dict[str, list[dict[str, Any]]] = {}
    for row in labels.to_dict("records"):
        if task == "image_score":
            result = [
                {"from_name": "score", "to_name": "image", "type": "rating", "value": {"rating": int(row["score"])}}
            ]
        elif task == "pairwise":
            result = [{"from_name": "choice", "to_name": "prompt", "type": "choices",
                       "value": {"choices": [row["choice"]]}}]  # fmt: skip
        else:
            result = [{"from_name": "decision", "to_name": "question", "type": "choices",
                       "value": {"choices": [row["decision"]]}},
                      {"from_name": "edit", "to_name": "question", "type": "textarea",
                       "value": {"text": [row.get("edit") or ""]}}]  # fmt: skip
        by_item.setdefault(row["item_id"], []).append(
            {
                "completed_by": {"email": row["annotator"]},
                "result": result,
                "was_cancelled": False,
                "created_at": row.get("created_at", ""),
            }
        )
    return [
        {"id": index + 1, "data": {"item_id": item["id"]}, "annotations": by_item.get(item["id"], [])}
        for index, item in enumerate(project["items"])
    ]
