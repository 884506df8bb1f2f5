"""Where HumbleBench questions come from: the official release (read by `humblebench.release`), our own
benchmark's verified images, and scene graphs (the paper's own construction), with an export for manual verification.

Every source writes the same rows (`schemas.HUMBLE_QUESTIONS`): the question stem, its options as a
JSON list with NOTA last, the correct letter, the type, the image file, and where it came from.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import pandas as pd

from blindspot.humblebench.settings import LETTERS, NOTA_TEXT, TYPES, Question, draw, is_nota
from blindspot.images import journaled_batches, read_rgb
from blindspot.io import read_csv, stable_id, write_text
from blindspot.models.json_output import read_json_output, schema_problem

log = logging.getLogger(__name__)
KIND_FIELDS = ("aux", "label", "subject")  # what a `from_benchmark` kind's text may name


def question_row(
    question: Question | SimpleNamespace, source: str, image_path: str, origin: Mapping[str, Any], verified: bool
) -> dict:
    """A row of the questions table; `question` is checked (a Question), or a flawed candidate's fields
    kept as written for people to fix."""
    return {
        "question_id": question.question_id,
        "source": source,
        "question": question.question,
        "options": json.dumps(list(question.options)),
        "label": question.label,
        "type": question.type,
        "image_path": image_path,
        "origin": json.dumps(origin, sort_keys=True),
        "verified": verified,
    }


def row_question(row: Mapping[str, Any]) -> Question:
    return Question(row["question_id"], row["question"], tuple(json.loads(row["options"])), row["label"], row["type"])


# The official release ------------------------------------------------------------------------------
# Our benchmark's images ----------------------------------------------------------------------------
def _instances(taxonomy: Mapping[str, Any], subcategory: str) -> list[str]:
    """The domain's instances, the image's own subcategory first (the hardest distractors)."""
    groups = taxonomy["subcategories"]
    ordered = [subcategory, *(name for name in groups if name != subcategory)]
    return list(dict.fromkeys(m for name in ordered for m in [*groups[name]["atypical"], *groups[name]["typical"]]))


def _options(truth: str, pool: Sequence[str], nota_correct: bool, rng: Any) -> tuple[tuple[str, ...], str]:
    """Up to four options and NOTA last: the truth among distractors from `pool`, or (when NOTA is to
    be correct) distractors only. Returns the options and the correct letter."""
    distractors = [value for value in pool if value != truth]
    wanted = len(LETTERS) - 1 - (0 if nota_correct else 1)
    chosen = [distractors[i] for i in sorted(rng.permutation(len(distractors))[:wanted])]
    if not nota_correct:
        chosen.insert(int(rng.integers(len(chosen) + 1)), truth)
    options = (*chosen, NOTA_TEXT)
    return options, LETTERS[len(chosen)] if nota_correct else LETTERS[chosen.index(truth)]


def questions_from_benchmark(
    pairs: pd.DataFrame,
    taxonomies: Mapping[str, Mapping[str, Any]],
    kinds: Mapping[str, Mapping[str, str]],
    nota_share: float,
    seed: int,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Questions about each kept image of the benchmark, from the facts its generation controlled and the
    VLM filter verified: the subject instance (kind `subject`) and the value of the triplet's knob
    (a kind named like the knob). `kinds` gives each kind's type and question text ({subject},
    {aux} and {label} are filled in); a knob without a kind is skipped and counted. Distractors come
    from the taxonomy: the domain's other instances, the knob's other values. A share `nota_share` of
    questions, drawn per question, lose their correct option, so NOTA is right."""
    rows, skipped = [], {}
    for pair in pairs.itertuples(index=False):
        taxonomy = taxonomies[pair.domain]
        for role in ("corr", "adv"):
            instance = pair.correct_instance if role == "corr" else pair.adversarial_instance
            value = pair.correct_value if role == "corr" else pair.adversarial_value
            facts = {"subject": (instance, _instances(taxonomy, pair.subcategory))}
            facts[pair.knob] = (value, list(taxonomy["knobs"][pair.knob]["values"]))
            for kind, (truth, pool) in facts.items():
                if kind not in kinds:
                    skipped[kind] = skipped.get(kind, 0) + 1
                    continue
                question_id = stable_id("benchmark", pair.pair_id, role, kind)
                rng = draw(seed, question_id, "options")
                options, label = _options(truth, pool, bool(rng.random() < nota_share), rng)
                fields = dict(zip(KIND_FIELDS, (pair.aux_element, pair.label, instance), strict=True))
                text = kinds[kind]["text"].format(**fields)
                question = Question(question_id, text, options, label, kinds[kind]["type"])
                origin = {"pair_id": pair.pair_id, "role": role, "kind": kind, "domain": pair.domain, "truth": truth}
                rows.append(question_row(question, "benchmark", getattr(pair, f"{role}_path"), origin, verified=True))
    return rows, skipped


# Scene graphs --------------------------------------------------------------------------------------
def read_scene_graphs(path: str | Path) -> list[dict[str, Any]]:
    """Scene graphs in the Panoptic Scene Graph style: {"images": [{"image_id", "file_name" (relative to
    the file), "objects": [{"id", "category", "bbox": [x0, y0, x1, y1]}], "relations": [{"subject",
    "object", "predicate"}]}]}. Relations must name objects of their own image, and every image file must
    be there: a ValueError names the first that is not, before any model loads."""
    path = Path(path)
    try:
        graphs = json.loads(path.read_text(encoding="utf-8"))["images"]
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"scene graphs {path} are not JSON: {error}") from None
    except (KeyError, TypeError):
        raise ValueError(f"scene graphs {path} have no 'images' list (the Panoptic Scene Graph layout)") from None
    for number, graph in enumerate(graphs):
        where = f"scene graphs {path}: image {graph.get('image_id', number)}"
        missing = [key for key in ("image_id", "file_name", "objects") if key not in graph]
        missing += sorted(
            {key for obj in graph.get("objects", []) for key in ("id", "category", "bbox") if key not in obj}
        )
        if missing:
            raise ValueError(f"{where} lacks {', '.join(missing)}")
        ids = {obj["id"] for obj in graph["objects"]}
        for relation in graph.get("relations", []):
            if relation.get("subject") not in ids or relation.get("object") not in ids:
                raise ValueError(f"{where} has a relation between unknown objects {relation}")
        graph["file_name"] = str(path.parent / graph["file_name"])
        if not Path(graph["file_name"]).is_file():
            raise ValueError(f"{where}: its file {graph['file_name']} is not there")
    return graphs


class SceneObject(NamedTuple):
    image_id: str
    object_id: int
    category: str
    file_name: str
    bbox: tuple[int, int, int, int]


def scene_objects(graphs: Sequence[Mapping[str, Any]]) -> list[SceneObject]:
    """Every object of every scene graph, in order."""
    return [
        SceneObject(graph["image_id"], obj["id"], obj["category"], graph["file_name"], tuple(obj["bbox"]))
        for graph in graphs
        for obj in graph["objects"]
    ]


def read_crop(obj: SceneObject) -> Any:
    """The object's box cut from its image (RGB)."""
    return read_rgb(obj.file_name).crop(obj.bbox)


def attribute_cues(
    graphs: Sequence[Mapping[str, Any]],
    describer: Any,
    instruction: str,
    max_new_tokens: int,
    journal_path: str | Path,
) -> dict[tuple[str, int], str]:
    """What a VLM says about each cropped object (`instruction` with {category}): candidate attribute
    cues for the question writer, as the paper's InstructBLIP step gives. The crops are cut a batch at
    a time (a scene-graph release has hundreds of thousands of objects), each from its image read again:
    the reads run beside the model. The cues are journaled a batch at a time (`journaled_batches`), so
    a job killed midway describes only the batches it had not finished."""
    objects = scene_objects(graphs)
    spec = describer.spec

    def describe(batch: list[SceneObject], crops: list[Any]) -> list[str]:
        return describer.describe([instruction.format(category=o.category) for o in batch], crops, max_new_tokens)

    key = ("attribute cues", spec.outputs, instruction, max_new_tokens)
    texts = journaled_batches(
        objects, describer.batch_size, read_crop, describe, journal_path, key, desc="describe objects"
    ).results
    return {(o.image_id, o.object_id): text for o, text in zip(objects, texts, strict=True)}


QUESTIONS_SCHEMA = {
    "type": "object",
    "properties": {
        "questions": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "type": {"enum": list(TYPES)},
                    "question": {"type": "string", "minLength": 1, "maxLength": 200},
                    "options": {
                        "type": "array",
                        "minItems": 4,
                        "maxItems": 4,
                        "items": {"type": "string", "minLength": 1, "maxLength": 80},
                    },
                    "answer": {"enum": ["A", "B", "C", "D", "none"]},
                },
                "required": ["type", "question", "options", "answer"],
            },
        }
    },
    "required": ["questions"],
}


def scene_description(graph: Mapping[str, Any], cues: Mapping[tuple[str, int], str]) -> dict[str, str]:
    """The prompt fields for one image: its objects with their cues, and its relations."""
    names = {obj["id"]: f"{obj['category']}#{obj['id']}" for obj in graph["objects"]}
    objects = [
        f"- {names[obj['id']]} at {obj['bbox']}: {cues.get((graph['image_id'], obj['id']), '') or 'no cue'}"
        for obj in graph["objects"]
    ]
    relations = [f"- {names[r['subject']]} {r['predicate']} {names[r['object']]}" for r in graph.get("relations", [])]
    return {"objects": "\n".join(objects), "relations": "\n".join(relations) or "- none"}


def parse_scene_questions(text: str, graph: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The questions an LLM wrote for one image, NOTA appended as option E, each as a candidate row with
    the problem it has, if any ("bad_options": repeated or blank options, or one that already reads NOTA;
    "bad_question": a blank question). A
    candidate with a problem is never repaired here: people can fix it (modify) in verification.
    Returns the rows and the image's status: ok, or malformed (no JSON of QUESTIONS_SCHEMA: no rows, and
    the reason logged). Never raises, whatever the writer wrote."""
    written, unreadable = read_json_output(text)
    unreadable = unreadable or schema_problem(written, QUESTIONS_SCHEMA)
    if unreadable:
        log.warning("image %s: the questions written are malformed: %s", graph["image_id"], unreadable)
        return [], "malformed"
    written = written["questions"]
    rows = []
    for index, item in enumerate(written):
        options = [option.strip() for option in item["options"]]
        label = "E" if item["answer"] == "none" else item["answer"]
        question_id = stable_id("scene_graph", graph["image_id"], index, item["question"])
        origin = {"image_id": graph["image_id"]}
        fields = (question_id, item["question"].strip(), (*options, NOTA_TEXT), label, item["type"])
        bad_options = len(set(map(str.lower, options))) != len(options) or any(not o or is_nota(o) for o in options)
        flaw = "bad_options" if bad_options else "" if fields[1] else "bad_question"  # blank after stripping
        if flaw:
            flawed = SimpleNamespace(**dict(zip(Question.__dataclass_fields__, fields, strict=True)))
            rows.append(
                question_row(flawed, "scene_graph", graph["file_name"], origin | {"problem": flaw}, verified=False)
            )
            continue
        rows.append(question_row(Question(*fields), "scene_graph", graph["file_name"], origin, verified=False))
    return rows, "ok"


def problem(row: Mapping[str, Any]) -> str:
    """What is wrong with a candidate (empty when nothing is)."""
    return json.loads(row["origin"]).get("problem", "")


VERIFICATION_COLUMNS = ["question_id", "image_path", "type", "question", *LETTERS, "label", "problem", "decision"]
DECISIONS = ("keep", "modify", "delete")
DECISION_COLUMNS = ["question_id", "decision", "question", *LETTERS, "label", "type"]  # people's decisions, edits


def export_for_verification(rows: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    """A CSV for people to check each candidate: `decision` is left empty for keep, modify or delete; a
    modified row's question, options A-E and label are read back as edited."""
    table = pd.DataFrame(
        [
            {
                "question_id": r["question_id"],
                "image_path": r["image_path"],
                "type": r["type"],
                "question": r["question"],
                **dict(zip(LETTERS, json.loads(r["options"]), strict=False)),
                "label": r["label"],
                "problem": problem(r),
                "decision": "",
            }
            for r in rows
        ],
        columns=VERIFICATION_COLUMNS,
    )
    write_text(path, table.to_csv(index=False))


class Decisions(NamedTuple):
    """People's decisions on the candidates, one row per question id (`DECISION_COLUMNS`), and the file
    they came from, which every error about them names."""

    table: pd.DataFrame
    source: str | Path


def decisions_from_labels(labels: pd.DataFrame, path: str | Path) -> Decisions:
    """People's decisions from the labels of a `question_check` annotation project, read from its export
    `path` (a row per annotator and item: annotator, item_id, decision, edit), where a modify's edit is
    JSON with the question, the options and the label. A question given different labels by two people
    is an error: the sheet must say one thing."""
    split = labels.groupby("item_id")[["decision", "edit"]].nunique().max(axis=1)
    if (split > 1).any():
        raise ValueError(f"{path}: people disagree on question(s) {', '.join(split[split > 1].index[:5])}")
    rows = []
    for label in labels.drop_duplicates("item_id").itertuples(index=False):
        row = {
            "question_id": label.item_id,
            "decision": label.decision,
            "question": "",
            "label": "",
            "type": "",
            **dict.fromkeys(LETTERS, ""),
        }
        if label.decision == "modify":
            try:
                edit = json.loads(label.edit)
                options = [str(option) for option in edit["options"]]
                row |= {"question": str(edit["question"]), "label": str(edit["label"]), "type": edit.get("type", "")}
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(
                    f"{path}: question {label.item_id}: a modify's edit must be JSON with question, options and label"
                ) from None
            if len(options) > len(LETTERS):
                raise ValueError(f"{path}: question {label.item_id}: {len(options)} options (at most {len(LETTERS)})")
            row |= dict(zip(LETTERS, options, strict=False))
        rows.append(row)
    return Decisions(pd.DataFrame(rows, columns=DECISION_COLUMNS).set_index("question_id"), path)


def read_verification_sheet(path: str | Path) -> Decisions:
    """People's decisions from the verification CSV as they filled it in, by question id; an empty or
    unparseable file, or one without a column `DECISION_COLUMNS` names, is a ValueError naming the file."""
    sheet = read_csv(path, "scene-graph verification", dtype=str, keep_default_na=False)
    missing = [column for column in DECISION_COLUMNS if column not in sheet.columns]
    if missing:
        raise ValueError(
            f"{path}: the verification sheet lacks columns {missing} (it needs {', '.join(DECISION_COLUMNS)})"
        )
    return Decisions(sheet.set_index("question_id"), path)


def apply_verification(rows: Sequence[Mapping[str, Any]], decisions: Decisions) -> tuple[list[dict[str, Any]], dict]:
    """The candidates after the people's `decisions` (`read_verification_sheet`, `decisions_from_labels`):
    kept as they were, modified as edited (and checked again), deleted, or, without a decision, left out.
    Returns the rows and a count per decision."""
    decided, path = decisions
    bad = sorted(set(decided["decision"]) - {*DECISIONS, ""})
    if bad:
        raise ValueError(f"{path}: decisions must be one of {', '.join(DECISIONS)} (or empty), not {bad}")
    unknown = sorted(set(decided.index) - {r["question_id"] for r in rows})
    if unknown:
        raise ValueError(f"{path}: question ids that are not candidates: {', '.join(unknown[:5])}")
    kept, counts = [], dict.fromkeys([*DECISIONS, "undecided"], 0)
    for row in rows:
        decision = decided["decision"].get(row["question_id"], "") or "undecided"
        counts[decision] += 1
        if decision == "keep":
            if problem(row):
                raise ValueError(
                    f"{path}: question {row['question_id']} is kept but has {problem(row)}; modify or delete it"
                )
            kept.append(dict(row) | {"verified": True})
        elif decision == "modify":
            edit = decided.loc[row["question_id"]]
            filled = "".join(letter if edit[letter].strip() else " " for letter in LETTERS).rstrip()
            if " " in filled:  # closing the gap would move the options after it, and the label with them
                raise ValueError(f"{path}: question {row['question_id']} has an empty option among A-{filled[-1]}")
            options = tuple(edit[letter].strip() for letter in filled)
            try:
                question = Question(
                    row["question_id"],
                    edit["question"].strip(),
                    options,
                    edit["label"].strip(),
                    edit["type"] or row["type"],
                )
            except ValueError as error:
                raise ValueError(f"{path}: {error}") from None
            origin = {k: v for k, v in json.loads(row["origin"]).items() if k != "problem"} | {"modified": True}
            kept.append(question_row(question, row["source"], row["image_path"], origin, verified=True))
    return kept, counts


def questions_from_scene_graphs(
    graphs: Sequence[Mapping[str, Any]], cues: Mapping[tuple[str, int], str], writer: Any, template: Any
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Candidate questions, unverified: the LLM `writer` gets each image's objects, cues and relations
    through `template` and answers with QUESTIONS_SCHEMA's JSON; NOTA is appended as option E."""
    conversations = [template.render(**scene_description(graph, cues)) for graph in graphs]
    texts = writer.generate_json(conversations, QUESTIONS_SCHEMA)
    rows, counters = [], {"images": len(graphs), "ok": 0, "malformed": 0}
    for graph, text in zip(graphs, texts, strict=True):
        found, status = parse_scene_questions(text, graph)
        counters[status] += 1
        for row in found:
            row["origin"] = json.dumps(
                json.loads(row["origin"]) | {"writer_template": template.version}, sort_keys=True
            )
        rows += found
    counters["questions"] = len(rows)
    counters["with_problems"] = sum(bool(problem(row)) for row in rows)
    return rows, counters
