"""The human studies' steps and the table building they call: a project per task, people's scores joined
to the filter validation images, the annotators' kappa table; and the steps run on Label Studio exports."""

import json

import pandas as pd
import pytest
from helpers.workflow import REPO
from PIL import Image

from blindspot import schemas
from blindspot.annotation.agreement import annotator_kappas, annotator_table, mean_pairwise_kappa
from blindspot.annotation.labels import scored_images
from blindspot.annotation.projects import (
    PAIRWISE_INSTRUCTIONS,
    QUESTION_CHECK_INSTRUCTIONS,
    load_project,
    make_projects,
)
from blindspot.io import write_table
from blindspot.prompts import PromptTemplate

CHOICES = pd.DataFrame(
    [
        ("ann1", "p1", "corr"),
        ("ann2", "p1", "corr"),
        ("ann3", "p1", "adv"),
        ("ann1", "p2", "adv"),
        ("ann2", "p2", "neither"),
        ("ann3", "p2", "adv"),
        ("ann1", "p3", "corr"),
        ("ann2", "p3", "adv"),
    ],
    columns=["annotator", "pair_id", "choice"],
)


def annotation_images(folder) -> pd.DataFrame:
    """Four filter validation images: the filter kept i1 and i2 and rejected i3 and i4."""
    paths = []
    for i, colour in enumerate(["red", "green", "blue", "white"]):
        paths.append(str(folder / f"i{i + 1}.png"))
        Image.new("RGB", (8, 8), colour).save(paths[-1])
    return pd.DataFrame(
        {
            "image_id": ["i1", "i2", "i3", "i4"],
            "path": paths,
            "pair_id": "p",
            "triplet_id": "t",
            "domain": ["animals", "animals", "objects", "objects"],
            "t2i": "m",
            "role": "corr",
            "description": "d",
            "vlm_scores": [json.dumps({"a": s}) for s in (9, 8, 2, 3)],
            "mean_vlm_score": [9.0, 8.0, 2.0, 3.0],
            "accepted": [True, True, False, False],
        }
    )


def annotation_pairs(folder) -> pd.DataFrame:
    Image.new("RGB", (8, 8), "red").save(folder / "a.png")
    Image.new("RGB", (8, 8), "blue").save(folder / "b.png")
    return pd.DataFrame(
        {
            "pair_id": ["p1", "p2"],
            "triplet_id": "t",
            "domain": ["animals", "objects"],
            "t2i": "m",
            "neutral_prompt": "x",
            "left_role": ["corr", "adv"],
            "left_image_id": "a",
            "left_path": str(folder / "a.png"),
            "right_image_id": "b",
            "right_path": str(folder / "b.png"),
        }
    )


def test_a_project_per_task_in_a_folder_named_like_it(tmp_path):
    sources = {"image_score": annotation_images(tmp_path), "pairwise": annotation_pairs(tmp_path)}
    projects = make_projects(
        sources, ["alice", "bob"], tmp_path / "projects", "/data/local-files/?d=", {"image_score": "Score it."}
    )
    assert list(projects) == ["image_score", "pairwise"]
    assert sorted(p.name for p in (tmp_path / "projects").iterdir()) == ["image_score", "pairwise"]
    for task, project in projects.items():
        assert load_project(tmp_path / "projects" / task) == project
        assert project["task"] == task
        assert list(project["annotators"]) == ["alice", "bob"]
    assert [item["id"] for item in projects["image_score"]["items"]] == ["i1", "i2", "i3", "i4"]
    assert [item["id"] for item in projects["pairwise"]["items"]] == ["p1", "p2"]
    assert projects["image_score"]["instructions"] == "Score it."  # given; pairwise has its own
    assert projects["pairwise"]["instructions"] == PAIRWISE_INSTRUCTIONS


def test_people_s_scores_are_averaged_per_image(tmp_path):
    images = annotation_images(tmp_path)
    labels = pd.DataFrame(
        [("ann1", "i1", 10), ("ann2", "i1", 7), ("ann1", "i3", 2)], columns=["annotator", "item_id", "score"]
    )
    scored = scored_images(labels, images, "scores.json")
    assert list(scored["image_id"]) == ["i1", "i3"]  # only the images people scored
    assert list(scored["human_score"]) == [8.5, 2.0]
    assert list(scored.columns) == [*images.columns, "human_score"]
    strangers = pd.concat([labels, pd.DataFrame([("ann1", "i9", 3)], columns=labels.columns)])
    with pytest.raises(
        ValueError,
        match=r"scores\.json: scores for images outside the filter validation subset: "
        r"\['i9'\]",
    ):
        scored_images(strangers, images, "scores.json")


def test_the_annotator_table_is_the_kappa_matrix_and_its_mean():
    table = annotator_table(CHOICES)
    matrix = annotator_kappas(CHOICES)
    assert list(table.columns) == ["Annotator", "ann1", "ann2", "ann3"]
    assert list(table["Annotator"]) == ["ann1", "ann2", "ann3", "mean (pairs)"]
    assert table.iloc[:3, 1:].astype(float).equals(matrix.reset_index(drop=True))
    assert table.iloc[3].tolist() == ["mean (pairs)", mean_pairwise_kappa(matrix), "", ""]


def label_studio(items, name, value):
    """A Label Studio export: (item id, annotator, label) as `name`'s result with `value`."""
    by_item = {}
    for item, who, label in items:
        by_item.setdefault(item, []).append(
            {"completed_by": {"email": who}, "result": [{"from_name": name, "value": value(label)}]}
        )
    return json.dumps(
        [
            {"id": i + 1, "data": {"item_id": item}, "annotations": notes}
            for i, (item, notes) in enumerate(by_item.items())
        ]
    )


def test_the_steps_read_label_studio_exports(tmp_path):
    from blindspot.steps.annotation import human_preferences, validate_filter

    write_table(tmp_path / "pairs.parquet", annotation_pairs(tmp_path), schemas.ANNOTATION_PAIRS)
    choices = [
        (pair, who, side) for pair in ("p1", "p2") for who, side in (("a1", "left"), ("a2", "left"), ("a3", "right"))
    ]
    (tmp_path / "choices.json").write_text(label_studio(choices, "choice", lambda side: {"choices": [side]}))
    out = {name: str(tmp_path / name) for name in ("majority.csv", "row.json", "k.csv", "k.md", "k.tex")}
    human_preferences(
        preference_pairs=str(tmp_path / "pairs.parquet"),
        labels=str(tmp_path / "choices.json"),
        majority=out["majority.csv"],
        human_row=out["row.json"],
        csv=out["k.csv"],
        markdown=out["k.md"],
        latex=out["k.tex"],
    )
    # two of three chose left: corr where corr is on the left (p1), adv where it is not (p2)
    assert pd.read_csv(out["majority.csv"]).values.tolist() == [["p1", "corr"], ["p2", "adv"]]
    row = json.loads((tmp_path / "row.json").read_text())
    assert (row["animals"]["accuracy"], row["objects"]["accuracy"], row["overall"]["accuracy"]) == (1.0, 0.0, 0.5)
    assert list(pd.read_csv(out["k.csv"])["Annotator"]) == ["a1", "a2", "a3", "mean (pairs)"]

    write_table(tmp_path / "images.parquet", annotation_images(tmp_path), schemas.ANNOTATION_IMAGES)
    scores = [("i1", "a1", 10), ("i2", "a1", 4), ("i3", "a1", 1), ("i4", "a1", 2)]
    (tmp_path / "scores.json").write_text(label_studio(scores, "score", lambda score: {"rating": score}))
    files = {
        "filter_validation": str(tmp_path / "images.parquet"),
        "labels": str(tmp_path / "scores.json"),
        "csv": out["k.csv"],
        "markdown": out["k.md"],
        "latex": out["k.tex"],
    }
    validate_filter(evaluators=["a1"], threshold=8, **files)
    table = pd.read_csv(out["k.csv"]).set_index("domain")
    assert table.loc["overall", "binary_disagreement"] == 0.25  # i2: the filter kept it, the person did not
    assert table.loc["overall", "human_mean_kept"] == 7.0
    caption = (tmp_path / "k.md").read_text().split("\n\n")[0]
    assert caption.startswith(
        "Filter validation (paper, 4.2 and Appendix D): the designated evaluator's 1-10 "
        "scores (a1) against the VLM filter on 4 images."
    )
    assert "decision_kappa: Cohen's kappa between the person's keep/reject (score >= 8)" in caption
    validate_filter(evaluators=["a1"], threshold=4, **files)
    assert pd.read_csv(out["k.csv"]).set_index("domain").loc["overall", "binary_disagreement"] == 0.0  # the threshold
    # a second person's scores count only when they are a designated evaluator
    scores += [("i1", "a2", 2), ("i2", "a2", 10)]
    (tmp_path / "scores.json").write_text(label_studio(scores, "score", lambda score: {"rating": score}))
    with pytest.raises(ValueError, match=r"image scores by \['a2'\], who are not in annotation\.filter_evaluators"):
        validate_filter(evaluators=["a1"], threshold=8, **files)
    validate_filter(evaluators=["a1", "a2"], threshold=8, **files)
    table = pd.read_csv(out["k.csv"]).set_index("domain")
    # i1 (10, 2) and i2 (4, 10) average 6 and 7: the filter kept both, the people neither
    assert table.loc["animals", ["human_mean_kept", "binary_disagreement"]].tolist() == [6.5, 1.0]


def test_the_projects_step_adds_the_question_check_with_scene_candidates(tmp_path):
    from blindspot.humblebench.questions import question_row
    from blindspot.humblebench.settings import Question
    from blindspot.steps.annotation import make_annotation_projects

    write_table(tmp_path / "images.parquet", annotation_images(tmp_path), schemas.ANNOTATION_IMAGES)
    write_table(tmp_path / "pairs.parquet", annotation_pairs(tmp_path), schemas.ANNOTATION_PAIRS)
    arguments = {
        "filter_validation": str(tmp_path / "images.parquet"),
        "preference_pairs": str(tmp_path / "pairs.parquet"),
        "annotators": ["alice", "bob"],
        "filter_evaluators": ["bob"],
        "image_url_prefix": "/img/",
        "judge_template": str(REPO / "config" / "prompts" / "judge_image_v1.yaml"),
        "out": str(tmp_path / "p"),
        "human_study": [],
        "study_annotators": [],
    }
    make_annotation_projects(scene_candidates=[], **arguments)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["image_score", "pairwise"]
    # the evaluators are shown the VLM filter's own rubric, the annotators the A.2 rubric
    rubric = PromptTemplate.load(arguments["judge_template"]).rubric
    assert load_project(tmp_path / "p" / "image_score")["instructions"] == rubric
    assert load_project(tmp_path / "p" / "pairwise")["instructions"] == PAIRWISE_INSTRUCTIONS
    # the filter validation goes to the designated evaluator only (the paper: "a trained human evaluator")
    assert list(load_project(tmp_path / "p" / "image_score")["annotators"]) == ["bob"]
    assert list(load_project(tmp_path / "p" / "pairwise")["annotators"]) == ["alice", "bob"]
    with pytest.raises(ValueError, match=r"filter_evaluators \['carol'\] are not in annotation\.annotators"):
        make_annotation_projects(scene_candidates=[], **(arguments | {"filter_evaluators": ["carol"]}))
    question = Question("s1", "What colour?", ("red", "blue", "None of the above"), "A", "Attribute")
    candidates = pd.DataFrame([question_row(question, "scene_graph", str(tmp_path / "i1.png"), {}, verified=False)])
    write_table(tmp_path / "candidates.parquet", candidates, schemas.HUMBLE_QUESTIONS)
    make_annotation_projects(scene_candidates=[str(tmp_path / "candidates.parquet")], **arguments)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["image_score", "pairwise", "question_check"]
    tasks = json.loads((tmp_path / "p" / "pairwise" / "tasks.json").read_text())
    assert tasks[0]["data"]["left_image"].startswith("/img/")
    assert [item["id"] for item in load_project(tmp_path / "p" / "question_check")["items"]] == ["s1"]
    assert list(load_project(tmp_path / "p" / "question_check")["annotators"]) == ["alice", "bob"]
    assert load_project(tmp_path / "p" / "question_check")["instructions"] == QUESTION_CHECK_INSTRUCTIONS
    bare = tmp_path / "bare.yaml"  # a judge template without a rubric: nothing to show the evaluators
    bare.write_text("name: judge_image\nversion: 9\nuser: 'Description: {{ description }}'\n")
    with pytest.raises(ValueError, match=r"bare\.yaml has no rubric to show the filter evaluators"):
        make_annotation_projects(scene_candidates=[], **(arguments | {"judge_template": str(bare)}))


def test_the_projects_step_adds_the_human_study_with_each_annotator_s_own_questions(tmp_path):
    """HumbleBench's human study: a humble_answer project for the study's annotators (not the subsets'),
    each item for the one whose set holds it; a set for someone who is not a study annotator is refused."""
    from blindspot.steps.annotation import make_annotation_projects

    write_table(tmp_path / "images.parquet", annotation_images(tmp_path), schemas.ANNOTATION_IMAGES)
    write_table(tmp_path / "pairs.parquet", annotation_pairs(tmp_path), schemas.ANNOTATION_PAIRS)
    picture = tmp_path / "humble" / "q.png"
    picture.parent.mkdir()
    picture.write_bytes(b"png")
    study = pd.DataFrame(
        {
            "annotator": ["dora", "erin"],
            "item_id": ["original:q1", "nota_only:q2"],
            "setting": ["original", "nota_only"],
            "question_id": ["q1", "q2"],
            "type": ["Object"] * 2,
            "image_path": [str(picture)] * 2,
            "question": ["What is it?", "What colour?"],
            "letters": ["ABC", "AC"],
            "options": [json.dumps(["a cat", "a dog", "None of the above"]), json.dumps(["red", "None of the above"])],
        }
    )
    write_table(tmp_path / "study.parquet", study, schemas.HUMAN_STUDY)
    arguments = {
        "filter_validation": str(tmp_path / "images.parquet"),
        "preference_pairs": str(tmp_path / "pairs.parquet"),
        "annotators": ["alice", "bob"],
        "filter_evaluators": ["bob"],
        "image_url_prefix": "/img/",
        "judge_template": str(REPO / "config" / "prompts" / "judge_image_v1.yaml"),
        "out": str(tmp_path / "p"),
        "scene_candidates": [],
        "human_study": [str(tmp_path / "study.parquet")],
        "study_annotators": ["dora", "erin"],
    }
    make_annotation_projects(**arguments)
    project = load_project(tmp_path / "p" / "humble_answer")
    assert list(project["annotators"]) == ["dora", "erin"]
    assert [(item["id"], item["annotator"], item["options"]) for item in project["items"]] == [
        ("original:q1", "dora", "A. a cat\nB. a dog\nC. None of the above"),
        ("nota_only:q2", "erin", "A. red\nC. None of the above"),
    ]
    with pytest.raises(ValueError, match=r"humble_answer: items for erin, who are not among the annotators \['dora'\]"):
        make_annotation_projects(**(arguments | {"study_annotators": ["dora"]}))
