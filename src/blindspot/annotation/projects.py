"""Human annotation: projects for the three tasks of the papers, as Label Studio projects and for the
built-in annotation page (`blindspot.annotation.server`).

Tasks:
- `image_score`: an image against its own description, 1-10 with the VLM filter's rubric, the
  `rubric` of its judge template (`image_stage.judge_template`), so people and VLMs score on the same
  anchored scale (ProtoBias's filter validation, from `benchmark/annotation/filter_validation.parquet`).
- `pairwise`: the neutral prompt and the two images of a test pair in the left/right order drawn when
  the subset was made; left, right or neither (`preference_pairs.parquet`), judged by ProtoBias's
  Appendix A.2 rubric (`PAIRWISE_INSTRUCTIONS`). Imports map left/right back to corr/adv.
- `question_check`: a HumbleBench question with its options and label: keep, modify (with the
  edited question, options and label) or delete (a questions table, e.g. the scene-graph candidates).
- `humble_answer`: HumbleBench's human study (Table 7): a question as its setting shows it, answered
  with one of the letters shown. Each item is one annotator's (`annotator`, from
  `humblebench.human_study.sample_question_sets`): the built-in page shows a person only their own
  items, and a label by anyone else is refused when read.

Each project carries its instructions, written once, in `project.json` (`instructions`): the built-in
page shows them above every item, and `label_studio.push` makes them the Label Studio project's
instructions, shown before labelling; the label configs keep a short header only. A project folder
holds `project.json` (task, instructions, items, annotators and their tokens), Label Studio's
`tasks.json` and `label_config.xml`. Both tools export labels in Label Studio's JSON export format,
which `blindspot.annotation.labels` reads.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from blindspot.humblebench.settings import lettered
from blindspot.io import read_json, write_json, write_text

TASKS = ("image_score", "pairwise", "question_check", "humble_answer")
# What `make_project` writes into project.json that every reader needs (`instructions` came later).
PROJECT_KEYS = ("task", "items", "annotators", "image_root", "storage_path", "image_url_prefix")
PAIR_CHOICES = ("left", "right", "neither")
CONTROLS = {
    "image_score": "score",
    "pairwise": "choice",
    "question_check": "decision",
    "humble_answer": "answer",
}  # each config's required one

# ProtoBias, Appendix A.2 ("Annotation rubric"), addressed to the annotator.
PAIRWISE_INSTRUCTIONS = (
    "Judge only how well each image matches what the prompt says. Check whether each image shows the "
    "entities, attributes, counts, colours, spatial relations, foreground and background placement and every "
    "other detail the prompt states.\n\n"
    "Do not prefer an image because it is more common, more realistic, more pleasing to look at or more typical "
    "of its subject, unless the prompt asks for that.\n\n"
    'If both images are similarly valid, or similarly invalid, choose "neither" (no clear preference).'
)
QUESTION_CHECK_INSTRUCTIONS = "Is the question answerable from the image, with exactly the labelled option correct?"
# Not in the paper (docs/fidelity.md, the human study): what the models are asked, said to a person.
HUMBLE_ANSWER_INSTRUCTIONS = (
    "Look at the image and choose the one option it supports.\n\n"
    'If no option is supported by the image, choose "None of the above". Answer from the image alone.'
)
# Each task's instructions unless given: image_score's are its judge template's rubric, which a caller passes.
INSTRUCTIONS = {
    "pairwise": PAIRWISE_INSTRUCTIONS,
    "question_check": QUESTION_CHECK_INSTRUCTIONS,
    "humble_answer": HUMBLE_ANSWER_INSTRUCTIONS,
}

LABEL_CONFIGS = {
    "image_score": """<View>
  <Header value="Score the image against its description, 1 to 10 (see Instructions)"/>
  <View style="display: flex; gap: 1em">
    <View style="flex: 1">
      <Image name="image" value="$image"/>
    </View>
    <View style="flex: 1">
      <Text name="description" value="$description"/>
      <Rating name="score" toName="image" maxRating="10" icon="star" size="medium" required="true"/>
    </View>
  </View>
</View>
""",
    "pairwise": """<View>
  <Header value="Which image matches the prompt? (see Instructions)"/>
  <Text name="prompt" value="$prompt"/>
  <View style="display: flex; gap: 1em">
    <View style="flex: 1">
      <Header value="Left" size="4"/>
      <Image name="left" value="$left_image"/>
    </View>
    <View style="flex: 1">
      <Header value="Right" size="4"/>
      <Image name="right" value="$right_image"/>
    </View>
  </View>
  <Choices name="choice" toName="prompt" choice="single" showInline="true" required="true">
    <Choice value="left"/>
    <Choice value="right"/>
    <Choice value="neither"/>
  </Choices>
</View>
""",
    "question_check": """<View>
  <Header value="Check the question against the image (see Instructions)"/>
  <View style="display: flex; gap: 1em">
    <View style="flex: 1">
      <Image name="image" value="$image"/>
    </View>
    <View style="flex: 1">
      <Text name="question" value="$question"/>
      <Text name="options" value="$options"/>
      <Header value="Labelled correct" size="5"/>
      <Text name="label" value="$label"/>
      <Choices name="decision" toName="question" choice="single" showInline="true" required="true">
        <Choice value="keep"/>
        <Choice value="modify"/>
        <Choice value="delete"/>
      </Choices>
      <TextArea name="edit" toName="question"
                placeholder='For modify: {"question": ..., "options": [...], "label": "A"}'/>
    </View>
  </View>
</View>
""",
    # Label Studio shows every task to every user: each task names whose it is (a Data Manager filter on
    # `annotator` gives a person their own), and a pull refuses anyone else's answer.
    "humble_answer": """<View>
  <Header value="Answer the question from the image (see Instructions)"/>
  <View style="display: flex; gap: 1em">
    <View style="flex: 1">
      <Image name="image" value="$image"/>
    </View>
    <View style="flex: 1">
      <Header value="For annotator" size="6"/>
      <Text name="for" value="$annotator"/>
      <Text name="question" value="$question"/>
      <Text name="options" value="$options"/>
      <Choices name="answer" toName="question" choice="single" showInline="true" required="true">
        <Choice value="A"/>
        <Choice value="B"/>
        <Choice value="C"/>
        <Choice value="D"/>
        <Choice value="E"/>
      </Choices>
    </View>
  </View>
</View>
""",
}


# The columns each task reads from its table (`task_items`).
TASK_COLUMNS = {
    "image_score": ("image_id", "path", "description"),
    "pairwise": ("pair_id", "left_path", "right_path", "neutral_prompt", "left_role"),
    "question_check": ("question_id", "image_path", "question", "options", "label"),
    "humble_answer": ("item_id", "annotator", "image_path", "question", "options", "letters"),
}


def task_items(task: str, table: pd.DataFrame) -> list[dict[str, Any]]:
    """The items of a task from its table: an id, the image files it shows, and the text fields."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r} (tasks: {', '.join(TASKS)})")
    missing = [column for column in TASK_COLUMNS[task] if column not in table.columns]
    if missing:
        raise ValueError(
            f"task {task} needs a table with columns {', '.join(TASK_COLUMNS[task])}; this one lacks "
            f"{', '.join(missing)} (is it another task's table?)"
        )
    empty = table[list(TASK_COLUMNS[task])].isna()
    if empty.to_numpy().any():
        column = empty.any().idxmax()
        raise ValueError(f"task {task}: row {empty[column].to_numpy().argmax()} of the table has no {column}")
    if task == "image_score":
        return [
            {"id": r.image_id, "images": {"image": r.path}, "description": r.description}
            for r in table.itertuples(index=False)
        ]
    if task == "pairwise":
        return [
            {
                "id": r.pair_id,
                "images": {"left_image": r.left_path, "right_image": r.right_path},
                "prompt": r.neutral_prompt,
                "left_role": r.left_role,
            }
            for r in table.itertuples(index=False)
        ]
    if task == "humble_answer":
        return [
            {
                "id": r.item_id,
                "images": {"image": r.image_path},
                "annotator": r.annotator,
                "question": r.question,
                "options": lettered(json.loads(r.options), r.letters),
                "letters": r.letters,
            }
            for r in table.itertuples(index=False)
        ]
    return [  # question_check
        {
            "id": r.question_id,
            "images": {"image": r.image_path},
            "question": r.question,
            "options": lettered(json.loads(r.options)),
            "label": r.label,
        }
        for r in table.itertuples(index=False)
    ]


def make_project(
    task: str,
    table: pd.DataFrame,
    annotators: Sequence[str],
    folder: str | Path,
    image_url_prefix: str,
    image_root: str | Path | None = None,
    instructions: str | None = None,
) -> dict[str, Any]:
    """Write a project folder: `project.json` (with the task's instructions and a secret token per
    annotator, for the built-in page), and Label Studio's `tasks.json` and `label_config.xml`.

    `instructions`: what annotators are told, by default the task's own (`INSTRUCTIONS`); `image_score`
    has none of its own and needs the VLM filter's rubric (its judge template's `rubric`).

    Label Studio shows local images through a local-files storage: its `storage_path` is the deepest
    folder above every image, and `image_root` (Label Studio's LOCAL_FILES_DOCUMENT_ROOT) a folder
    above that, by default its parent: Label Studio refuses a storage at the document root itself. An
    image's URL is `image_url_prefix` ("/data/local-files/?d=") + its path below `image_root`.
    `project.json` records both folders and the prefix. A table without rows makes a project without
    items."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r} (tasks: {', '.join(TASKS)})")
    instructions = instructions if instructions is not None else INSTRUCTIONS.get(task)
    if not instructions or not instructions.strip():
        raise ValueError(f"{task} needs instructions for its annotators (image_score: its judge template's rubric)")
    if len(set(annotators)) != len(annotators) or not annotators:
        raise ValueError("annotators must be one or more distinct names")
    items = task_items(task, table)
    strangers = sorted({item["annotator"] for item in items if "annotator" in item} - set(annotators))
    if strangers:
        raise ValueError(
            f"{task}: items for {', '.join(strangers)}, who are not among the annotators {list(annotators)}"
        )
    folder = Path(folder)
    # Images by absolute path: the page and Label Studio find them from any folder the project is served from.
    items = [
        item | {"images": {field: str(Path(path).resolve()) for field, path in item["images"].items()}}
        for item in items
    ]
    images = [Path(path) for item in items for path in item["images"].values()]
    # an empty project (no candidates, say) shows no image: any storage will do
    storage = Path(os.path.commonpath([p.parent for p in images])) if images else folder.resolve()
    root = Path(image_root).resolve() if image_root is not None else storage.parent
    if storage == root or not storage.is_relative_to(root):
        at = ", not at it" if storage == root else ""
        raise ValueError(
            f"the images' folder {storage} must be below the image root {root}{at}"
            " (Label Studio refuses a local-files storage at its LOCAL_FILES_DOCUMENT_ROOT): choose a folder above it"
        )
    project = {
        "task": task,
        "instructions": instructions,
        "items": items,
        "image_root": str(root),
        "storage_path": str(storage),
        "image_url_prefix": image_url_prefix,
        "annotators": {name: secrets.token_urlsafe(16) for name in annotators},
    }
    write_json(folder / "project.json", project)
    write_json(folder / "tasks.json", label_studio_tasks(project))
    write_text(folder / "label_config.xml", LABEL_CONFIGS[task])
    return project


def own_items(project: Mapping[str, Any], annotator: str) -> list[dict[str, Any]]:
    """The items an annotator labels: every item, but an item naming its `annotator` is theirs alone."""
    return [item for item in project["items"] if item.get("annotator", annotator) == annotator]


def label_studio_tasks(project: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The project's items as Label Studio tasks: `item_id`, the text fields and the image URLs the
    task's label config shows (a pair's `left_role` stays out of sight)."""

    def url(path: str) -> str:
        return project["image_url_prefix"] + quote(Path(path).resolve().relative_to(project["image_root"]).as_posix())

    return [
        {
            "id": index + 1,
            "data": {
                "item_id": item["id"],
                **{k: v for k, v in item.items() if k not in ("id", "images", "left_role")},
                **{field: url(path) for field, path in item.get("images", {}).items()},
            },
        }
        for index, item in enumerate(project["items"])
    ]


def make_projects(
    sources: Mapping[str, pd.DataFrame],
    annotators: Sequence[str],
    folder: str | Path,
    image_url_prefix: str,
    instructions: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """A project per task (`make_project`), each in its own folder under `folder` named like the task;
    `sources` maps a task to its table, `instructions` a task to its instructions where they are not the
    task's own (image_score's: the judge template's rubric)."""
    instructions = instructions or {}
    return {
        task: make_project(
            task, table, annotators, Path(folder) / task, image_url_prefix, instructions=instructions.get(task)
        )
        for task, table in sources.items()
    }


def load_project(folder: str | Path) -> dict[str, Any]:
    """A project folder's `project.json`; a folder without one, or one without a project's keys, is a
    ValueError naming it."""
    path = Path(folder) / "project.json"
    if not path.is_file():
        raise ValueError(f"{folder}: not a project folder (no project.json): make one with `blindspot annotate make`")
    project = read_json(path)
    missing = [key for key in PROJECT_KEYS if key not in project]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)}: not what `blindspot annotate make` writes; make it again")
    return project


def outside_workflow_outputs(folder: str | Path) -> Path:
    """`folder`, resolved, where `serve` and `push` may keep what they write beside a project (people's
    labels, the Label Studio link): not inside a workflow output (a folder Snakemake marks with
    `.snakemake_timestamp`), which Snakemake replaces, with all it holds, when the subsets change."""
    folder = Path(folder).resolve()
    for output in (folder, *folder.parents):
        if (output / ".snakemake_timestamp").is_file():
            raise ValueError(
                f"{folder} is inside the workflow's output {output}, which Snakemake replaces (with the labels "
                f"kept there) when the subsets change: copy the project out first, e.g. cp -r {folder} "
                f"annotation/{folder.name}"
            )
    return folder


def project_instructions(project: Mapping[str, Any], folder: str | Path) -> str:
    """The instructions annotators are shown: the project's, else (a project made before projects carried
    them) its task's own; an image_score project without them, which has none of its own, is refused."""
    instructions = project.get("instructions") or INSTRUCTIONS.get(project["task"])
    if not instructions:
        raise ValueError(f"{Path(folder) / 'project.json'} has no instructions for annotators: make the project again")
    return instructions
