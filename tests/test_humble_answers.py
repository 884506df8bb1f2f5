"""One VLM answering one shard of HumbleBench's questions in one setting (`humble_answers`): the shard's
questions, the model loaded only when there are some, and the answers with the tiny Qwen2.5-VL."""

import json

import pandas as pd
import pytest
from conftest import REPO
from PIL import Image

from blindspot import tables
from blindspot.config import ModelSpec
from blindspot.humblebench.answers import answer_in_batches, answer_shard, shard_questions
from blindspot.humblebench.questions import question_row
from blindspot.humblebench.settings import Question, present, setting_transforms, shard_of
from blindspot.prompts import PromptTemplate

OPTIONS = ("red", "green", "blue", "yellow", "None of the above")
TEMPLATE = REPO / "config" / "prompts" / "humble_original_v1.yaml"


def questions(folder, n: int) -> pd.DataFrame:
    rows = []
    for i in range(n):
        path = folder / f"{i}.png"
        Image.new("RGB", (32 + 8 * i, 32), ["red", "green", "blue"][i % 3]).save(path)
        question = Question(f"q{i}", "What colour is the car?", OPTIONS, "ABCE"[i % 4], "Attribute")
        rows.append(question_row(question, "benchmark", str(path), {}, verified=True))
    return pd.DataFrame(rows, columns=tables.HUMBLE_QUESTIONS.names)


def test_the_shards_split_the_questions_by_id_in_their_order(tmp_path):
    table = questions(tmp_path, 12)
    shards = [shard_questions(table, shard, 3) for shard in range(3)]
    assert sorted(q for shard in shards for q in shard["question_id"]) == sorted(table["question_id"])
    for shard, part in enumerate(shards):
        assert all(shard_of(q, 3) == shard for q in part["question_id"])
        assert list(part.index) == sorted(part.index)  # the table's order
    # a question's shard depends on its id alone: more questions never move it
    more = shard_questions(questions(tmp_path, 20), 1, 3)
    assert set(shards[1]["question_id"]) <= set(more["question_id"])
    assert shard_questions(table, 0, 1).equals(table)


def test_a_setting_s_transforms_leave_out_what_only_names_it(tiny_config):
    settings = tiny_config["humblebench"]["settings"]
    assert setting_transforms(settings["original"]) == {}
    assert setting_transforms(settings["noise_grounding"]) == {"noise_image": True}
    entry = {"label": "Both", "template": "x.yaml", "headline": "overall", "shuffle_nota": True, "remove_correct": True}
    assert setting_transforms(entry) == {"shuffle_nota": True, "remove_correct": True}
    question = Question("q1", "What colour is the car?", OPTIONS, "C", "Attribute")
    assert present(question, "both", setting_transforms(entry), 3) == present(question, "both", entry, 3)


def test_an_empty_shard_never_loads_the_model(tmp_path):
    def load_scorer():
        raise AssertionError("the model was loaded for an empty shard")

    spec = ModelSpec(name="vlm-a", backend="transformers", gpus=0, dtype="float32", path="x")
    frame, counters = answer_shard(
        questions(tmp_path, 3).iloc[:0], "original", {}, PromptTemplate.load(TEMPLATE), spec, load_scorer, 4, 0
    )
    assert frame.empty
    assert list(frame.columns) == tables.HUMBLE_ANSWERS.names
    assert counters == {"questions": 0, "unparseable_text": 0, "text_and_logits_agree": 0}


@pytest.mark.slow
def test_the_tiny_vlm_answers_its_shard_as_the_setting_shows_it(built_config, tmp_path):
    from blindspot.config import model_spec
    from blindspot.models.vlm_scoring import TransformersVLMScorer

    spec = model_spec(built_config, "tiny-qwen2.5-vl")
    loaded = []

    def load_scorer():
        loaded.append(TransformersVLMScorer(spec, batch_size=2))
        return loaded[-1]

    template = PromptTemplate.load(TEMPLATE)
    table = questions(tmp_path, 4)
    transforms = {"remove_correct": True, "shuffle_nota": True}
    frame, counters = answer_shard(table, "nota_only", transforms, template, spec, load_scorer, 4, 3)
    assert len(loaded) == 1
    shown = [(present(Question(r["question_id"], r["question"], OPTIONS, r["label"], r["type"]), "nota_only",
                      transforms, 3), r["image_path"]) for r in table.to_dict("records")]  # fmt: skip
    expected = answer_in_batches(shown, loaded[0], {"nota_only": template}, 4, 3)
    assert frame.drop(columns=["vlm", "model_id", "model_revision"]).to_dict("records") == [
        {name: row[name] for name in frame.columns if name in row} for row in expected
    ]
    assert (frame["vlm"] == "tiny-qwen2.5-vl").all()
    assert (frame["model_id"] == "built:tiny-qwen2.5-vl").all()
    assert (frame["model_revision"] == "").all()
    assert (frame["label"] == frame["nota"]).all()  # the correct option removed: NOTA is the label
    assert [len(json.loads(options)) for options in frame["options"]] == [4, 4, 4, 5]  # q3's label was NOTA
    assert counters == {
        "questions": 4,
        "unparseable_text": int((frame["prediction_text"] == "").sum()),
        "text_and_logits_agree": int((frame["prediction_text"] == frame["prediction_logits"]).sum()),
    }
