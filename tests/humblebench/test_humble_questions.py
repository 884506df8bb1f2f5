"""HumbleBench questions from the official release, from the benchmark's images and from scene graphs
(tiny VLM for the attribute cues, SmolLM2 writing the questions), the verification round trip, and
answering with the tiny Qwen2.5-VL."""

import collections
import copy
import functools
import io
import json
import re

import numpy as np
import pandas as pd
import pytest
from helpers.humble import RELEASE_RECORDS, RELEASE_TEXT, imagefolder, letter_protocol
from helpers.scene_graphs import make_scene_graphs
from helpers.unreadable_csvs import UNREADABLE_CSVS, assert_one_line_error
from helpers.workflow import SCENE_GRAPHS
from PIL import Image

from blindspot.humblebench import answers as humble_answers
from blindspot.humblebench import questions as humble_questions
from blindspot.humblebench import settings as humble
from blindspot.humblebench.questions import (
    apply_verification,
    decisions_from_labels,
    export_for_verification,
    questions_from_benchmark,
    read_scene_graphs,
    read_verification_sheet,
    row_question,
)
from blindspot.humblebench.release import load_release, split_release_question
from blindspot.models.spec import model_spec
from blindspot.prompts import PromptTemplate
from blindspot.protobias.taxonomy import load_taxonomy


def test_the_release_question_splits_into_stem_and_options():
    stem, options = split_release_question(RELEASE_TEXT, "q")
    assert stem == "What is the man holding?"
    assert options == ("an umbrella", "a phone", "a cup", "a bag", "None of the above")
    with pytest.raises(ValueError, match="no stem and lettered options"):
        split_release_question("What?\nB. x\nC. y", "q")
    with pytest.raises(ValueError, match="text after option B"):
        split_release_question("What?\nA. x\nB. y\nsomething else", "q")


def png_bytes(colour) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def loaded_imagefolder(tmp_path):
    """The imagefolder as `datasets.load_dataset` reads it: what the official code's `download_dataset`
    gets, images file-backed ({"bytes": None, "path": ...} once undecoded)."""
    import datasets

    return datasets.load_dataset(
        "imagefolder",
        data_dir=str(imagefolder(tmp_path / "imagefolder")),
        split="train",
        cache_dir=str(tmp_path / "hf_cache"),
    )


def hub_parquet_shards(tmp_path):
    """A hub snapshot of the parquet release (MM-Hallu/HumbleBench): shards as `push_to_hub` writes them,
    images embedded as bytes (`embed_table_storage`) under `data/train-0000i-of-0000n.parquet`."""
    from datasets.table import embed_table_storage

    dataset, folder = loaded_imagefolder(tmp_path), tmp_path / "snapshot"
    (folder / "data").mkdir(parents=True)
    for index in range(2):
        shard = dataset.shard(num_shards=2, index=index, contiguous=True).with_format("arrow")
        shard.map(embed_table_storage, batched=True).to_parquet(folder / "data" / f"train-{index:05d}-of-00002.parquet")
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files: data/train-*\n---\n")
    return str(folder)


def save_to_disk(tmp_path, as_dict):
    import datasets

    dataset, folder = loaded_imagefolder(tmp_path), tmp_path / "saved"
    (datasets.DatasetDict({"train": dataset}) if as_dict else dataset).save_to_disk(str(folder))
    return str(folder)


def records_with(tmp_path, image, suffix):
    """A .jsonl, .json or .parquet file whose images come as `image(colour)`: a path, bytes, or a dict."""
    Image.new("RGB", (8, 8), "red").save(tmp_path / "red.png")
    Image.new("RGB", (8, 8), "blue").save(tmp_path / "blue.png")
    records = [{k: v for k, v in r.items() if k != "colour"} | {"image": image(r["colour"])} for r in RELEASE_RECORDS]
    path = tmp_path / f"release.{suffix}"
    if suffix == "parquet":
        pd.DataFrame(records).to_parquet(path)
    elif suffix == "json":
        path.write_text(json.dumps(records))
    else:
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


RELEASE_LAYOUTS = {
    "imagefolder": lambda tmp: str(imagefolder(tmp / "imagefolder")),
    "hub_parquet_shards": hub_parquet_shards,
    "save_to_disk": lambda tmp: save_to_disk(tmp, as_dict=False),
    "save_to_disk_dict": lambda tmp: save_to_disk(tmp, as_dict=True),
    "jsonl_paths": lambda tmp: records_with(tmp, lambda colour: f"{colour}.png", "jsonl"),
    "json_paths": lambda tmp: records_with(tmp, lambda colour: f"{colour}.png", "json"),
    "jsonl_file_backed_dicts": lambda tmp: records_with(tmp, lambda c: {"bytes": None, "path": f"{c}.png"}, "jsonl"),
    "parquet_bytes": lambda tmp: records_with(tmp, png_bytes, "parquet"),
    "parquet_byte_dicts": lambda tmp: records_with(tmp, lambda c: {"bytes": png_bytes(c), "path": None}, "parquet"),
    "parquet_file_backed_dicts": lambda tmp: records_with(
        tmp, lambda c: {"bytes": None, "path": str(tmp / f"{c}.png")}, "parquet"
    ),
}


@pytest.mark.parametrize("layout", RELEASE_LAYOUTS)
def test_the_release_loads_from_every_official_layout(tmp_path, layout):
    source = RELEASE_LAYOUTS[layout](tmp_path)
    rows = load_release(source, tmp_path / "images")
    questions = [row_question(row) for row in rows]
    assert [(q.question_id, q.label, q.type) for q in questions] == [
        ("1", "B", "Object"),
        ("2", "E", "Relation"),
        ("3", "A", "Attribute"),
    ]
    assert questions[0].options == ("an umbrella", "a phone", "a cup", "a bag", "None of the above")
    colours = [np.asarray(Image.open(row["image_path"]).convert("RGB"))[0, 0].tolist() for row in rows]
    assert colours == [[255, 0, 0], [0, 0, 255], [255, 0, 0]]
    assert rows[0]["image_path"] == rows[2]["image_path"]  # one image, one file
    assert all(row["verified"] and row["source"] == "release" for row in rows)


def test_a_release_that_cannot_be_read_is_named(tmp_path):
    (tmp_path / "bad.jsonl").write_text(json.dumps({"question_id": "x", "question": RELEASE_TEXT}) + "\n")
    with pytest.raises(ValueError, match=r"lacks \['image', 'label', 'type'\]"):
        load_release(str(tmp_path / "bad.jsonl"), tmp_path / "images")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"a folder without a saved dataset, metadata\.jsonl or parquet shards"):
        load_release(str(tmp_path / "empty"), tmp_path / "images")
    with pytest.raises(ValueError, match="no such file or folder"):
        load_release(str(tmp_path / "missing.parquet"), tmp_path / "images")
    (tmp_path / "release.csv").write_text("question_id\n1\n")
    with pytest.raises(ValueError, match=r"a file must be \.jsonl, \.json or \.parquet"):
        load_release(str(tmp_path / "release.csv"), tmp_path / "images")
    folder = imagefolder(tmp_path / "nofilename")
    (folder / "metadata.jsonl").write_text(json.dumps({"question_id": 1}) + "\n")
    with pytest.raises(ValueError, match=r"metadata\.jsonl: line 1 has no file_name"):
        load_release(str(folder), tmp_path / "images")
    no_image = {
        "question_id": 9,
        "question": RELEASE_TEXT,
        "type": "Object",
        "label": "A",
        "image": {"bytes": None, "path": None},
    }
    (tmp_path / "notimage.jsonl").write_text(json.dumps(no_image) + "\n")
    with pytest.raises(ValueError, match=r"notimage.jsonl, question 9: no image \(a path or an image's bytes\)$"):
        load_release(str(tmp_path / "notimage.jsonl"), tmp_path / "images")


KINDS = {
    "subject": {"type": "Object", "text": "Which of these is in the image?"},
    "colour_tone": {"type": "Attribute", "text": "What colour is the {aux}?"},
}


def benchmark_pairs(n: int) -> pd.DataFrame:
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
                "knob": ["colour_tone", "count"][i % 2],
                "correct_value": ["red", "exactly two"][i % 2],
                "adversarial_value": ["blue", "exactly three"][i % 2],
                "corr_path": f"c{i}.png",
                "adv_path": f"a{i}.png",
            }
            for i in range(n)
        ]
    )


def test_benchmark_questions_ask_about_the_controlled_facts():
    taxonomy = load_taxonomy("config/taxonomy/animals.yaml", "animals")
    rows, skipped = questions_from_benchmark(benchmark_pairs(40), {"animals": taxonomy}, KINDS, 0.3, seed=1)
    assert skipped == {"count": 40}  # 20 pairs x 2 images with a count knob, which has no kind here
    assert len(rows) == 40 * 2 + 20 * 2
    for row in rows:
        question, origin = row_question(row), json.loads(row["origin"])
        assert question.options[-1] == "None of the above"
        assert len(set(question.options)) == len(question.options)
        truth = origin["truth"]
        if question.label == "E" or question.options[-1] == question.options["ABCDE".index(question.label)]:
            assert truth not in question.options  # NOTA is right only when the truth was removed
        else:
            assert question.options["ABCDE".index(question.label)] == truth
        expected_truth = {"corr": ("penguin", "red"), "adv": ("robin", "blue")}[origin["role"]]
        assert truth == expected_truth[0 if origin["kind"] == "subject" else 1]
        assert row["image_path"] == f"{'c' if origin['role'] == 'corr' else 'a'}{origin['pair_id'][1:]}.png"
        if origin["kind"] == "colour_tone":
            assert question.question == "What colour is the stone?"
            assert set(question.options[:-1]) <= {"red", "blue", "yellow", "white", "black"}
        else:
            assert set(question.options[:-1]) <= set(humble_questions._instances(taxonomy, "birds"))
    nota_correct = [r for r in rows if row_question(r).options["ABCDE".index(r["label"])] == "None of the above"]
    assert 0.15 < len(nota_correct) / len(rows) < 0.45  # a share near 0.3
    again, _ = questions_from_benchmark(benchmark_pairs(40), {"animals": taxonomy}, KINDS, 0.3, seed=1)
    assert again == rows  # seeded per question


def test_scene_graphs_are_read_and_checked(tmp_path):
    path = make_scene_graphs(tmp_path / "sg")
    graphs = read_scene_graphs(path)
    assert [g["image_id"] for g in graphs] == ["street", "kitchen"]
    objects = humble_questions.scene_objects(graphs)
    assert [(o.image_id, o.category) for o in objects] == [
        ("street", "car"),
        ("street", "tree"),
        ("kitchen", "table"),
        ("kitchen", "cup"),
        ("kitchen", "lamp"),
    ]
    car = humble_questions.read_crop(objects[0])
    assert car.size == (objects[0].bbox[2] - objects[0].bbox[0], objects[0].bbox[3] - objects[0].bbox[1])
    assert np.asarray(car)[5, 5].tolist() == [220, 30, 30]  # the car's box, cropped
    broken = json.loads(path.read_text())
    broken["images"][0]["relations"].append({"subject": 1, "object": 9, "predicate": "near"})
    (tmp_path / "sg" / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match="image street has a relation between unknown objects"):
        read_scene_graphs(tmp_path / "sg" / "broken.json")
    for edit, says in [
        (lambda graphs: graphs.pop("images"), "have no 'images' list"),
        (lambda graphs: graphs["images"][1]["objects"][0].pop("bbox"), "image kitchen lacks bbox"),
        (lambda graphs: graphs["images"][0].update(file_name="gone.png"), r"image street: its file .*gone\.png is not"),
    ]:
        broken = json.loads(path.read_text())
        edit(broken)
        (tmp_path / "sg" / "broken.json").write_text(json.dumps(broken))
        with pytest.raises(ValueError, match=f"^scene graphs {re.escape(str(tmp_path))}.*broken.json:? {says}"):
            read_scene_graphs(tmp_path / "sg" / "broken.json")


def test_the_writers_json_becomes_questions_and_bad_output_is_reported():
    graph = {"image_id": "street"}
    good = {
        "questions": [
            {
                "type": "Attribute",
                "question": "What colour is the car?",
                "options": ["red", "blue", "green", "white"],
                "answer": "A",
            },
            {
                "type": "Object",
                "question": "Which animal is there?",
                "options": ["dog", "cat", "horse", "cow"],
                "answer": "none",
            },
        ]
    }
    graph |= {"file_name": "street.png"}
    rows, status = humble_questions.parse_scene_questions(json.dumps(good), graph)
    assert status == "ok"
    questions = [row_question(row) for row in rows]
    assert [(q.label, q.options[-1]) for q in questions] == [("A", "None of the above"), ("E", "None of the above")]
    assert humble_questions.parse_scene_questions("{not json", graph) == ([], "malformed")
    assert humble_questions.parse_scene_questions(
        json.dumps({"questions": [good["questions"][0] | {"type": "x"}]}), graph
    ) == ([], "malformed")
    # A question with repeated options, or one that already reads NOTA, stays a candidate for people to fix.
    repeated = {
        "questions": [good["questions"][0] | {"options": ["red", "Red", "blue", "green"]}, good["questions"][1]]
    }
    rows, status = humble_questions.parse_scene_questions(json.dumps(repeated), graph)
    assert status == "ok"
    assert [humble_questions.problem(row) for row in rows] == ["bad_options", ""]
    nota = {"questions": [good["questions"][0] | {"options": ["red", "blue", "green", "None of the above"]}]}
    rows, _ = humble_questions.parse_scene_questions(json.dumps(nota), graph)
    assert humble_questions.problem(rows[0]) == "bad_options"
    with pytest.raises(ValueError, match="None of the above"):
        row_question(rows[0])


def candidate_rows(n: int) -> list[dict]:
    return [
        humble_questions.question_row(
            humble.Question(
                f"s{i}", f"Question {i}?", ("red", "blue", "green", "white", "None of the above"), "A", "Attribute"
            ),
            "scene_graph",
            f"img{i}.png",
            {"image_id": f"img{i}"},
            verified=False,
        )
        for i in range(n)
    ]


def test_verification_keeps_modifies_and_deletes(tmp_path):
    rows = candidate_rows(4)
    export_for_verification(rows, tmp_path / "verify.csv")
    sheet = pd.read_csv(tmp_path / "verify.csv", dtype=str, keep_default_na=False)
    assert list(sheet.columns) == [
        "question_id",
        "image_path",
        "type",
        "question",
        "A",
        "B",
        "C",
        "D",
        "E",
        "label",
        "problem",
        "decision",
    ]
    sheet["decision"] = ["keep", "modify", "delete", ""]
    sheet.loc[1, ["question", "B", "label"]] = ["What colour is the cup?", "purple", "B"]
    sheet.to_csv(tmp_path / "verify.csv", index=False)
    kept, counts = apply_verification(rows, read_verification_sheet(tmp_path / "verify.csv"))
    assert counts == {"keep": 1, "modify": 1, "delete": 1, "undecided": 1}
    assert [r["question_id"] for r in kept] == ["s0", "s1"]
    assert all(r["verified"] for r in kept)
    modified = row_question(kept[1])
    assert (modified.question, modified.options[1], modified.label) == ("What colour is the cup?", "purple", "B")
    assert json.loads(kept[1]["origin"])["modified"]
    sheet.loc[0, "decision"] = "maybe"
    sheet.to_csv(tmp_path / "verify.csv", index=False)
    with pytest.raises(ValueError, match=r"decisions must be one of keep, modify, delete .*\['maybe'\]"):
        apply_verification(rows, read_verification_sheet(tmp_path / "verify.csv"))
    flawed = [rows[0] | {"origin": json.dumps({"problem": "bad_options"})}, *rows[1:]]
    sheet.loc[0, "decision"] = "keep"
    sheet.to_csv(tmp_path / "verify.csv", index=False)
    with pytest.raises(ValueError, match="s0 is kept but has bad_options; modify or delete it"):
        apply_verification(flawed, read_verification_sheet(tmp_path / "verify.csv"))
    sheet.loc[1, "C"] = ""  # a gap: D would become C, and the label would no longer name its option
    sheet.to_csv(tmp_path / "verify.csv", index=False)
    with pytest.raises(ValueError, match="question s1 has an empty option among A-E"):
        apply_verification(rows, read_verification_sheet(tmp_path / "verify.csv"))
    sheet.loc[1, ["C", "D", "E"]] = ["", "", ""]  # no NOTA left
    sheet.to_csv(tmp_path / "verify.csv", index=False)
    with pytest.raises(ValueError, match=r"verify\.csv: .*s1"):
        apply_verification(rows, read_verification_sheet(tmp_path / "verify.csv"))


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        *UNREADABLE_CSVS,
        pytest.param(
            b"question_id,decision\ns0,keep\n",
            "the verification sheet lacks columns "
            "['question', 'A', 'B', 'C', 'D', 'E', 'label', 'type'] (it needs question_id, "
            "decision, question, A, B, C, D, E, label, type)",
            id="missing-columns",
        ),
    ],
)
def test_an_unreadable_verification_sheet_is_one_line_naming_it(tmp_path, content, problem):
    assert_one_line_error(read_verification_sheet, tmp_path / "verify.csv", content, problem)


def test_verification_labels_from_the_question_check_project(tmp_path):
    from blindspot.annotation.labels import label_studio_export, read_labels

    rows = candidate_rows(3)
    project = {"task": "question_check", "items": [{"id": r["question_id"]} for r in rows]}
    edit = json.dumps({"question": "Which colour?", "options": ["red", "pink", "None of the above"], "label": "B"})
    labels = pd.DataFrame(
        [
            ("ann1", "s0", "keep", ""),
            ("ann1", "s1", "modify", edit),
            ("ann1", "s2", "delete", ""),
            ("ann2", "s2", "delete", ""),
        ],
        columns=["annotator", "item_id", "decision", "edit"],
    )

    def export(frame):
        """The people's decisions as the step reads them from the project's export."""
        path = tmp_path / "labels.json"
        path.write_text(json.dumps(label_studio_export(project, frame)))
        return decisions_from_labels(read_labels("question_check", path), path)

    kept, counts = apply_verification(rows, export(labels))
    assert counts == {"keep": 1, "modify": 1, "delete": 1, "undecided": 0}
    modified = row_question(kept[1])
    assert (modified.question, modified.options, modified.label) == (
        "Which colour?",
        ("red", "pink", "None of the above"),
        "B",
    )
    assert modified.type == "Attribute"  # the edit names no type: the candidate's stays
    with pytest.raises(ValueError, match=r"people disagree on question\(s\) s0"):
        apply_verification(
            rows, export(pd.concat([labels, labels.iloc[[0]].assign(annotator="ann2", decision="delete")]))
        )
    with pytest.raises(ValueError, match="question s1: a modify's edit must be JSON"):
        apply_verification(rows, export(labels.assign(edit=labels["edit"].str.replace("{", "(", regex=False))))


@pytest.mark.slow
def test_scene_graph_questions_from_the_tiny_models(built_config, tmp_path):
    from blindspot.models.textgen import load_text_generator
    from blindspot.models.vlm_scoring import TransformersVLMScorer

    graphs = read_scene_graphs(make_scene_graphs(tmp_path / "sg"))
    describer = TransformersVLMScorer(model_spec(built_config, "tiny-qwen2.5-vl"), batch_size=4)
    handed, describe = [], describer.describe

    def describing(texts, images, tokens, kill_at=None):
        handed.append([i.size for i in images])
        if len(handed) == kill_at:
            raise RuntimeError("the job is killed")
        return describe(texts, images, tokens)

    def cues_of(journal, kill_at=None):
        describer.describe = functools.partial(describing, kill_at=kill_at)
        return humble_questions.attribute_cues(graphs, describer, "Describe the {category}.", 4, journal)

    with pytest.raises(RuntimeError, match="killed"):
        cues_of(tmp_path / "cues.jsonl", kill_at=2)
    cues = cues_of(tmp_path / "cues.jsonl")
    assert set(cues) == {("street", 1), ("street", 2), ("kitchen", 1), ("kitchen", 2), ("kitchen", 3)}
    # The crops come a model batch at a time, never all at once; resumed, only the unfinished batch.
    sizes = [(x1 - x0, y1 - y0) for x0, y0, x1, y1 in (o.bbox for o in humble_questions.scene_objects(graphs))]
    assert handed == [sizes[:4], sizes[4:], sizes[4:]]
    assert cues_of(tmp_path / "uninterrupted.jsonl") == cues
    fields = humble_questions.scene_description(graphs[1], cues)
    assert "cup#2 at [40, 34, 56, 50]" in fields["objects"]
    assert fields["relations"] == "- cup#2 on table#1\n- lamp#3 above table#1"
    # The run's own token budget (conftest.SCENE_GRAPHS): the preset's 120 cut the JSON short.
    config = copy.deepcopy(built_config)
    config["models"]["smollm2-135m"]["generation"]["max_tokens"] = SCENE_GRAPHS["writer_max_tokens"]
    writer = load_text_generator(model_spec(config, "smollm2-135m"), seed=0, batch_size=2)
    template = PromptTemplate.load(SCENE_GRAPHS["template"])
    rows, counters = humble_questions.questions_from_scene_graphs(graphs, cues, writer, template)
    flawed = [row for row in rows if humble_questions.problem(row)]
    assert counters == {"images": 2, "ok": 2, "malformed": 0, "questions": len(rows), "with_problems": len(flawed)}
    # Both images' questions are read: one to three each, NOTA appended as option E.
    per_image = collections.Counter(json.loads(row["origin"])["image_id"] for row in rows)
    assert set(per_image) == {"street", "kitchen"}
    assert max(per_image.values()) <= 3, per_image
    assert len({row["question_id"] for row in rows}) == len(rows)
    for row in rows:
        options = json.loads(row["options"])
        assert len(options) == 5, row
        assert options[-1] == "None of the above"
        assert row["label"] in tuple("ABCDE"), row
        assert row["type"] in humble.TYPES, row
        assert not row["verified"]
        assert json.loads(row["origin"])["writer_template"] == template.version
        written = options[:4]
        options_ok = len({o.lower() for o in written}) == 4 and all(o and not humble.is_nota(o) for o in written)
        # A flawed candidate is kept for people to fix, with what is wrong; a sound one is a valid question.
        expected = "bad_options" if not options_ok else "" if row["question"] else "bad_question"
        assert humble_questions.problem(row) == expected, row
        if not expected:
            row_question(row)
    assert len(flawed) < len(rows), flawed  # at least one candidate is a valid question


@pytest.mark.slow
def test_the_tiny_vlm_answers_with_letter_probabilities_and_text(built_config):
    import torch

    from blindspot.humblebench.parsing import parse_answer
    from blindspot.models.vlm_scoring import TransformersVLMScorer

    scorer = TransformersVLMScorer(model_spec(built_config, "tiny-qwen2.5-vl"), batch_size=2)
    template = PromptTemplate.load("config/prompts/humble_original_v4.yaml")
    question = humble.Question(
        "q1", "What colour is the car?", ("red", "green", "blue", "yellow", "None of the above"), "C", "Attribute"
    )
    shown = [
        humble.present(question, "original", {}, 0),
        humble.present(question, "nota_only", {"remove_correct": True}, 0),
    ]
    pictures = [Image.new("RGB", (32, 32), "red"), humble.noise_image("q1", 0, (32, 32))]
    asked = humble_answers.Asked.load({"original": template, "nota_only": template}, letter_protocol(4), 0)
    rows = humble_answers.answer_questions(list(zip(shown, pictures, strict=True)), scorer, asked)
    assert [len(json.loads(r["letter_probabilities"])) for r in rows] == [5, 4]  # the letters shown
    letters = humble_answers.option_token_ids(scorer.tokenizer)
    for row, item, picture in zip(rows, shown, pictures, strict=True):
        conversation = asked.conversation(item)
        with torch.inference_mode():
            logits = scorer.model(**scorer.inputs([conversation], [picture])).logits[0, -1].float()
        shown_ids = [letters["ABCDE".index(letter)] for letter in item.letters]
        expected = torch.softmax(logits, dim=-1)[shown_ids].tolist()
        assert json.loads(row["letter_probabilities"]) == pytest.approx(expected, rel=1e-4)
        assert row["prediction_logits"] == item.letters[int(np.argmax(expected))]
        options = dict(zip(item.letters, item.options, strict=True))
        assert row["prediction_text"] == (parse_answer(row["text"], options) or "")
        assert row["template_version"] == template.version
    assert shown[1].letters == ("A", "B", "D", "E")  # the official NOTA-only: C removed, a gap
    assert (rows[1]["label"], rows[1]["nota"]) == ("E", "E")
