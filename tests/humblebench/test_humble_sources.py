"""HumbleBench's questions table from its sources together (`humble_sources.collect_questions`), and the
make_humble_questions step that reads and writes it."""

import json
import re

import pandas as pd
import pytest
from helpers.humble import SOURCE_OPTIONS as OPTIONS
from PIL import Image

from blindspot import schemas
from blindspot.humblebench.questions import export_for_verification, question_row, read_verification_sheet
from blindspot.humblebench.settings import Question
from blindspot.humblebench.sources import collect_questions
from blindspot.io import read_table, write_table
from blindspot.protobias.taxonomy import load_taxonomy

RELEASE_TEXT = "What is the man holding?\nA. an umbrella\nB. a phone\nC. a cup\nD. a bag\nE. None of the above"
FROM_BENCHMARK = {
    "nota_share": 0.3,
    "kinds": {"subject": {"type": "Object", "text": "Which of these is in the image?"}},
}


def write_release(folder, ids=("r1", "r2")):
    Image.new("RGB", (8, 8), "red").save(folder / "img.png")
    records = [
        {"question_id": q, "question": RELEASE_TEXT, "type": "Object", "label": "B", "image": "img.png"} for q in ids
    ]
    (folder / "release.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(folder / "release.jsonl")


def benchmark_pairs() -> pd.DataFrame:
    """Two kept pairs; the colour_tone knob has no kind in FROM_BENCHMARK, so it gets no question."""
    return pd.DataFrame(
        [
            {
                "pair_id": f"p{i}",
                "domain": "animals",
                "subcategory": "birds",
                "label": "bird",
                "correct_instance": "penguin",
                "adversarial_instance": "robin",
                "aux_element": "stone",
                "knob": "colour_tone",
                "correct_value": "red",
                "adversarial_value": "blue",
                "corr_path": f"c{i}.png",
                "adv_path": f"a{i}.png",
            }
            for i in range(2)
        ]
    )


def candidates() -> pd.DataFrame:
    """Three scene-graph candidates; s1 has a problem people have to fix."""
    rows = [
        question_row(
            Question(f"s{i}", f"Question {i}?", OPTIONS, "A", "Attribute"),
            "scene_graph",
            f"img{i}.png",
            {"image_id": f"img{i}"} | ({"problem": "bad_options"} if i == 1 else {}),
            verified=False,
        )
        for i in range(3)
    ]
    return pd.DataFrame(rows, columns=schemas.HUMBLE_QUESTIONS.names)


@pytest.fixture
def animals():
    return {"animals": load_taxonomy("config/taxonomy/animals.yaml", "animals")}


def test_every_source_in_order_with_its_count(tmp_path, animals):
    release = write_release(tmp_path)
    frame, counters = collect_questions(
        release, tmp_path / "images", benchmark_pairs(), animals, FROM_BENCHMARK, 7, candidates(), None
    )
    assert list(frame.columns) == schemas.HUMBLE_QUESTIONS.names
    # the release first, then two images of each pair with a subject question, then the candidates
    assert list(frame["source"]) == ["release"] * 2 + ["benchmark"] * 4 + ["scene_graph"] * 2
    assert counters == {
        "release": 2,
        "benchmark": 4,
        "benchmark_kinds_without_a_question": {"colour_tone": 4},
        "scene_graph_left_out_with_problems": 1,
        "scene_graph": 2,
        "questions": 8,
        "per_type": {"Object": 6, "Attribute": 2},
        "sample": {"limit": None, "sampled": 8, "total": 8},
        # Table 9's counts: without people's decisions, the one with a problem is left out (deleted)
        "scene_graph_filtering": {"Attribute": {"candidates": 3, "keep": 2, "modify": 0, "delete": 1, "undecided": 0}},
    }
    # without a verification file the candidates without problems are used, unverified
    assert list(frame.loc[frame["source"] == "scene_graph", "question_id"]) == ["s0", "s2"]
    assert not frame.loc[frame["source"] == "scene_graph", "verified"].any()
    again, _ = collect_questions(
        release, tmp_path / "images", benchmark_pairs(), animals, FROM_BENCHMARK, 7, candidates(), None
    )
    pd.testing.assert_frame_equal(frame, again)  # the benchmark's options are seeded per question
    other, _ = collect_questions(None, tmp_path / "images", benchmark_pairs(), animals, FROM_BENCHMARK, 8, None, None)
    assert list(other["options"]) != list(frame.loc[frame["source"] == "benchmark", "options"])


def test_people_decide_which_candidates_are_used(tmp_path):
    rows = candidates().to_dict("records")
    export_for_verification(rows, tmp_path / "verify.csv")
    sheet = pd.read_csv(tmp_path / "verify.csv", dtype=str, keep_default_na=False)
    sheet["decision"] = ["keep", "delete", ""]
    sheet.to_csv(tmp_path / "verify.csv", index=False)
    decisions = read_verification_sheet(str(tmp_path / "verify.csv"))
    frame, counters = collect_questions(None, tmp_path, None, {}, None, 7, candidates(), decisions)
    assert list(frame["question_id"]) == ["s0"]
    assert frame["verified"].all()
    decided = {"keep": 1, "modify": 0, "delete": 1, "undecided": 1}
    filtering = {"Attribute": {"candidates": 3, **decided}}  # Table 9's counts: people's decisions per type
    assert counters == {
        "scene_graph_decisions": decided,
        "scene_graph_filtering": filtering,
        "scene_graph": 1,
        "questions": 1,
        "per_type": {"Attribute": 1},
        "sample": {"limit": None, "sampled": 1, "total": 1},
    }


def test_no_source_is_an_empty_table_and_a_question_id_twice_is_an_error(tmp_path):
    frame, counters = collect_questions(None, tmp_path, None, {}, None, 7, None, None)
    assert frame.empty
    assert list(frame.columns) == schemas.HUMBLE_QUESTIONS.names
    assert counters == {"questions": 0, "per_type": {}, "sample": {"limit": None, "sampled": 0, "total": 0}}
    twice = pd.concat([candidates().iloc[[0]], candidates().iloc[[0]]], ignore_index=True)
    with pytest.raises(ValueError, match="question id s0 comes twice"):
        collect_questions(None, tmp_path, None, {}, None, 7, twice, None)


def test_the_step_reads_its_inputs_and_writes_the_table_and_counters(tmp_path):
    from blindspot.steps.humble import make_humble_questions

    pairs = benchmark_pairs()
    unused = {f.name: "x" if f.type == "string" else 0 for f in schemas.BENCHMARK_PAIRS if f.name not in pairs}
    write_table(tmp_path / "pairs.parquet", pairs.assign(**unused), schemas.BENCHMARK_PAIRS)
    write_table(tmp_path / "candidates.parquet", candidates(), schemas.HUMBLE_QUESTIONS)
    out, images, counters_out = tmp_path / "questions.parquet", tmp_path / "images", tmp_path / "q.counters.json"
    make_humble_questions(
        benchmark=[str(tmp_path / "pairs.parquet")],
        taxonomies=["config/taxonomy/animals.yaml"],
        scene_candidates=[str(tmp_path / "candidates.parquet")],
        verification=[],
        release_copy=[],
        release=write_release(tmp_path),
        from_benchmark=FROM_BENCHMARK,
        domains=["animals"],
        seed=7,
        out=str(out),
        images=str(images),
        counters_out=str(counters_out),
        limit=None,
    )
    frame = read_table(out, schemas.HUMBLE_QUESTIONS)
    assert list(frame["source"]) == ["release"] * 2 + ["benchmark"] * 4 + ["scene_graph"] * 2
    assert images.is_dir()
    counters = json.loads(counters_out.read_text())
    assert (counters["questions"], counters["release"]) == (8, 2)
    assert "provenance" in counters
    with pytest.raises(ValueError, match="domain"):  # a taxonomy checked against the domain it is given for
        make_humble_questions(
            benchmark=[str(tmp_path / "pairs.parquet")],
            taxonomies=["config/taxonomy/objects.yaml"],
            scene_candidates=[],
            verification=[],
            release_copy=[],
            release=None,
            from_benchmark=FROM_BENCHMARK,
            domains=["animals"],
            seed=7,
            out=str(out),
            images=str(images),
            counters_out=str(counters_out),
            limit=None,
        )


def test_the_step_reads_the_decisions_from_the_sheet_or_a_question_check_export(tmp_path):
    """The verification sheet (CSV) and a `question_check` project's labels (Label Studio's JSON export)
    decide the same; a bad export stops the step naming the file."""
    from blindspot.annotation.labels import label_studio_export
    from blindspot.steps.humble import make_humble_questions

    write_table(tmp_path / "candidates.parquet", candidates(), schemas.HUMBLE_QUESTIONS)
    export_for_verification(candidates().to_dict("records"), tmp_path / "verify.csv")
    sheet = pd.read_csv(tmp_path / "verify.csv", dtype=str, keep_default_na=False)
    sheet["decision"] = ["keep", "delete", ""]
    sheet.to_csv(tmp_path / "verify.csv", index=False)
    labels = pd.DataFrame(
        [("ann1", "s0", "keep", ""), ("ann1", "s1", "delete", "")], columns=["annotator", "item_id", "decision", "edit"]
    )
    project = {"task": "question_check", "items": [{"id": f"s{i}"} for i in range(3)]}
    (tmp_path / "labels.json").write_text(json.dumps(label_studio_export(project, labels)))

    def questions(verification: str) -> list[str]:
        out = tmp_path / "questions.parquet"
        make_humble_questions(
            benchmark=[],
            taxonomies=[],
            scene_candidates=[str(tmp_path / "candidates.parquet")],
            verification=[verification],
            release_copy=[],
            release=None,
            from_benchmark=None,
            domains=[],
            seed=7,
            out=str(out),
            images=str(tmp_path / "images"),
            counters_out=str(tmp_path / "q.counters.json"),
            limit=None,
        )
        return list(read_table(out, schemas.HUMBLE_QUESTIONS)["question_id"])

    assert questions(str(tmp_path / "verify.csv")) == questions(str(tmp_path / "labels.json")) == ["s0"]
    (tmp_path / "labels.json").write_text("not json")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'labels.json'} is not a JSON export")):
        questions(str(tmp_path / "labels.json"))


def test_a_release_that_cannot_be_read_is_one_line_naming_its_file(tmp_path):
    """Every JSON the release comes in (.jsonl, .json, an imagefolder's metadata.jsonl) is read by one
    reader: a bad line names the file and the line, a .json that is no list of questions names the file."""
    from blindspot.humblebench.release import load_release

    def refused(source, message: str) -> None:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
            load_release(str(source), tmp_path / "images")

    release = write_release(tmp_path)
    lines = (tmp_path / "release.jsonl").read_text().splitlines()
    (tmp_path / "release.jsonl").write_text(f"{lines[0]}\n\n{lines[1][:-1]}\n")
    refused(release, f"{release}: line 3 is not JSON (Expecting ',' delimiter: column {len(lines[1])})")
    (tmp_path / "release.jsonl").write_text('["not", "an", "object"]\n')
    refused(release, f"{release}: line 1 is not a JSON object")
    (tmp_path / "release.jsonl").write_bytes(b"\xff" + lines[0].encode())
    refused(release, f"{release}: not UTF-8 text (invalid start byte at byte 0)")
    as_object = tmp_path / "release.json"
    as_object.write_text(json.dumps({"questions": [json.loads(lines[0])]}))
    refused(as_object, f"{as_object}: not a list of questions (JSON objects)")
    folder = tmp_path / "imagefolder" / "test"
    folder.mkdir(parents=True)
    (folder / "metadata.jsonl").write_text(json.dumps(json.loads(lines[0]) | {"file_name": "img.png"}) + "\n{\n")
    refused(tmp_path / "imagefolder", f"{folder / 'metadata.jsonl'}: line 2 is not JSON (")
    (tmp_path / "release.parquet").write_bytes(b"not parquet")
    refused(tmp_path / "release.parquet", f"{tmp_path / 'release.parquet'}: not a parquet file (")


def test_an_imagefolder_s_metadata_named_directly_reads_as_its_folder(tmp_path, monkeypatch):
    """`--release HumbleBench/dataset/metadata.jsonl`, the file the official README shows: its `file_name`
    is read as the folder's is, relative to the metadata's folder, whatever folder the command runs in."""
    from blindspot.humblebench.release import load_release

    write_release(tmp_path)
    folder = tmp_path / "HumbleBench" / "dataset"
    (folder / "images").mkdir(parents=True)
    (tmp_path / "img.png").rename(folder / "images" / "1.png")
    records = [json.loads(line) for line in (tmp_path / "release.jsonl").read_text().splitlines()]
    lines = [json.dumps({k: v for k, v in r.items() if k != "image"} | {"file_name": "images/1.png"}) for r in records]
    (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    named = load_release("HumbleBench/dataset/metadata.jsonl", tmp_path / "a")
    from_folder = load_release("HumbleBench/dataset", tmp_path / "b")
    assert [row.pop("origin") for row in named] == ['{"release": "HumbleBench/dataset/metadata.jsonl"}'] * 2
    assert named == [{k: v for k, v in row.items() if k != "origin"} for row in from_folder]
    assert [row["image_path"] for row in named] == [str(folder / "images" / "1.png")] * 2
