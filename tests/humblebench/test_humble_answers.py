"""One VLM answering one shard of HumbleBench's questions in its settings (`humble_answers`): the shard's
questions (whole images), the model loaded only when there are some, and the answers with the tiny Qwen2.5-VL,
all settings in one job as each in its own."""

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from helpers.humble import OPTIONS, TEMPLATE, letter_protocol, questions
from PIL import Image

from blindspot import schemas
from blindspot.humblebench.answers import Asked, answer_in_batches, answer_shard, shard_questions
from blindspot.humblebench.humility import parsed_texts
from blindspot.humblebench.settings import Question, present, setting_transforms, shown_image
from blindspot.models.spec import ModelSpec
from blindspot.prompts import PromptTemplate
from blindspot.shards import shard_of


def test_the_shards_split_the_questions_by_image_in_their_order(tmp_path):
    table = questions(tmp_path, 12)
    # q0-q3 each on its own image; q4-q11 two to an image, named by its first question: q4 and q5 on q4's image
    shared = {f"q{i}": f"q{i - i % 2}" for i in range(4, 12)}
    table["image_path"] = [str(tmp_path / f"{shared.get(q, q)}.png") for q in table["question_id"]]
    shards = [shard_questions(table, shard, 3) for shard in range(3)]
    assert sorted(q for shard in shards for q in shard["question_id"]) == sorted(table["question_id"])
    for shard, part in enumerate(shards):
        assert all(shard_of(shared.get(q, q), 3) == shard for q in part["question_id"])  # the image's shard
        assert list(part.index) == sorted(part.index)  # the table's order
    assert {q: shard for shard, part in enumerate(shards) for q in part["question_id"]}["q5"] == shard_of("q4", 3)
    # by the hash of the image's name (`shards.shard_of`), pinned: moving it must not move an answered question
    assert [shard_of(f"q{i}", 7) for i in range(8)] == [0, 1, 4, 6, 2, 6, 3, 6]
    # an image's shard depends on its first question alone, never on where the image lies
    moved = shard_questions(table.assign(image_path=table["image_path"].str.replace(str(tmp_path), "/else")), 1, 3)
    assert moved.equals(shards[1].assign(image_path=shards[1]["image_path"].str.replace(str(tmp_path), "/else")))
    assert shard_questions(table, 0, 1).equals(table)


def test_a_setting_s_transforms_leave_out_what_only_names_it(tiny_config):
    settings = tiny_config["humblebench"]["settings"]
    assert setting_transforms(settings["original"]) == {}
    assert setting_transforms(settings["noise_grounding"]) == {"noise_image": True}
    entry = {"label": "Both", "template": "x.yaml", "headline": "overall", "shuffle_nota": True, "remove_correct": True}
    assert setting_transforms(entry) == {"shuffle_nota": True, "remove_correct": True}
    question = Question("q1", "What colour is the car?", OPTIONS, "C", "Attribute")
    assert present(question, "both", setting_transforms(entry), 3) == present(question, "both", entry, 3)


# The official repository's noise image (.cache/noise_image.png at its first commit, c59658e): the
# SHA-256 of its 256x256 grey pixels.
OFFICIAL_NOISE_PIXELS = "88c8bd199bbfe61a10be13d0a9acbedb269e33cc53e6ce8ec614b7a2aa9f34d1"


def test_nota_only_keeps_the_official_letters_with_a_gap_or_re_letters_as_asked():
    question = Question("q1", "What colour is the car?", OPTIONS, "C", "Attribute")
    shown = present(question, "nota_only", {"remove_correct": True}, seed=0)
    assert (shown.options, shown.letters) == (("red", "green", "yellow", "None of the above"), ("A", "B", "D", "E"))
    assert (shown.label, shown.nota) == ("E", "E")  # NOTA stays E, as the official code shows it
    assert shown.letter_map == {"A": "A", "B": "B", "C": "", "D": "D", "E": "E"}
    assert shown.prompt_fields()["options"] == "A. red\nB. green\nD. yellow\nE. None of the above"
    assert shown.prompt_fields()["letters"] == "A, B, D, E"
    relettered = present(question, "nota_only", {"remove_correct": True, "reletter": True}, seed=0)
    assert (relettered.letters, relettered.label, relettered.nota) == (("A", "B", "C", "D"), "D", "D")
    assert relettered.letter_map == {"A": "A", "B": "B", "C": "", "D": "C", "E": "D"}
    assert relettered.prompt_fields()["options"] == "A. red\nB. green\nC. yellow\nD. None of the above"
    already = Question("q2", "?", OPTIONS, "E", "Object")
    assert present(already, "nota_only", {"remove_correct": True}, seed=0).letters == tuple("ABCDE")
    with pytest.raises(ValueError, match="setting x: reletter is a form of remove_correct, which it does not set"):
        present(question, "x", {"reletter": True}, 0)
    with pytest.raises(ValueError, match="setting x: noise_per_question is a form of noise_image"):
        present(question, "x", {"noise_per_question": True}, 0)


def test_the_noise_setting_shows_the_official_noise_image_or_noise_per_question(tmp_path):
    paths = []
    for i, size in enumerate([(40, 32), (64, 48)]):
        paths.append(tmp_path / f"{i}.png")
        Image.new("RGB", size, "red").save(paths[-1])
    official = [
        present(Question(f"q{i}", "?", OPTIONS, "A", "Object"), "noise", {"noise_image": True}, 3) for i in range(2)
    ]
    assert [(shown.noise, shown.noise_image, shown.label) for shown in official] == [("official", True, "A")] * 2
    pictures = [np.asarray(shown_image(shown, str(path), seed=3)) for shown, path in zip(official, paths, strict=True)]
    assert pictures[0].shape == (256, 256, 3)
    assert (pictures[0] == pictures[1]).all()  # one image for every question
    assert (pictures[0][..., 0] == pictures[0][..., 2]).all()  # grey
    assert hashlib.sha256(pictures[0][..., 0].tobytes()).hexdigest() == OFFICIAL_NOISE_PIXELS
    transforms = {"noise_image": True, "noise_per_question": True}
    drawn = [present(Question(f"q{i}", "?", OPTIONS, "A", "Object"), "noise", transforms, 3) for i in range(2)]
    assert drawn[0].noise == "per_question"
    pictures = [np.asarray(shown_image(shown, str(path), seed=3)) for shown, path in zip(drawn, paths, strict=True)]
    assert [picture.shape for picture in pictures] == [(32, 40, 3), (48, 64, 3)]  # each image's size
    assert not (pictures[0][..., 0] == pictures[0][..., 1]).all()  # colour noise
    original = present(Question("q0", "?", OPTIONS, "A", "Object"), "original", {}, 3)
    assert (np.asarray(shown_image(original, str(paths[0]), seed=3)) == [255, 0, 0]).all()


def test_an_empty_shard_never_loads_the_model(tmp_path):
    def load_scorer():
        raise AssertionError("the model was loaded for an empty shard")

    spec = ModelSpec(name="vlm-a", backend="transformers", gpus=0, dtype="float32", path="x")
    journal = tmp_path / "answers.journal.jsonl"
    empty = questions(tmp_path, 3).iloc[:0]
    template = PromptTemplate.load(TEMPLATE)
    settings = {"original": ({}, template)}
    frame, counters = answer_shard(empty, settings, spec, load_scorer, letter_protocol(4), 0, journal)
    assert not journal.exists()
    assert frame.empty
    assert list(frame.columns) == schemas.HUMBLE_ANSWERS.names
    assert counters == {
        "questions": 0,
        "answers": 0,
        "unparseable_text": 0,
        "text_and_logits_agree": 0,
        "reasoned": 0,
        "cut_off": 0,
        "computed_items": 0,
        "letters_from_text": 0,
        "protocol": letter_protocol(4).params(),
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("transforms", "shown_letters"),
    [
        ({"remove_correct": True}, ["BCDE", "ACDE", "ABDE", "ABCDE"]),  # the official gap
        ({"remove_correct": True, "shuffle_nota": True}, ["ABCD", "ABCD", "ABCD", "ABCDE"]),
    ],
)
def test_the_tiny_vlm_answers_its_shard_as_the_setting_shows_it(built_config, tmp_path, transforms, shown_letters):
    from blindspot.models.spec import model_spec
    from blindspot.models.vlm_scoring import TransformersVLMScorer

    spec = model_spec(built_config, "tiny-qwen2.5-vl")
    loaded = []

    def load_scorer():
        loaded.append(TransformersVLMScorer(spec, batch_size=2))
        return loaded[-1]

    template = PromptTemplate.load(TEMPLATE)
    table = questions(tmp_path, 4)
    journal = tmp_path / "answers.journal.jsonl"
    frame, counters = answer_shard(
        table, {"nota_only": (transforms, template)}, spec, load_scorer, letter_protocol(4), 3, journal
    )
    assert len(loaded) == 1
    # Killed after its first batch (the journal cut down to it), the job answers only the second; its
    # table is the uninterrupted job's to the last bit.
    journal.write_text("".join(journal.read_text().splitlines(keepends=True)[:2]))
    answered, answer = [], loaded[0].choose
    loaded[0].choose = lambda conversations, *rest: answered.append(len(conversations)) or answer(conversations, *rest)
    resumed, resumed_counters = answer_shard(
        table, {"nota_only": (transforms, template)}, spec, lambda: loaded[0], letter_protocol(4), 3, journal
    )
    assert answered == [2]
    pd.testing.assert_frame_equal(resumed, frame)
    # Its throughput is over the questions it answered itself.
    assert resumed_counters["computed_items"] == 2
    loaded[0].choose = answer
    shown = [
        (
            present(
                Question(r["question_id"], r["question"], OPTIONS, r["label"], r["type"]), "nota_only", transforms, 3
            ),
            r["image_path"],
        )
        for r in table.to_dict("records")
    ]
    asked = Asked.load({"nota_only": template}, letter_protocol(4), 3)
    expected = answer_in_batches(shown, loaded[0], asked, tmp_path / "again.jsonl").results
    # the job batches prompts of like length together (transformers pads), so its probabilities are these to
    # float32's rounding, and all else equal
    probabilities = ["letter_probabilities", "letter_mass"]
    assert frame.drop(columns=["vlm", "model_id", "model_revision", *probabilities]).to_dict("records") == [
        {name: row[name] for name in frame.columns if name in row and name not in probabilities} for row in expected
    ]
    for mine, theirs in zip(frame["letter_probabilities"], expected, strict=True):
        assert json.loads(mine) == pytest.approx(json.loads(theirs["letter_probabilities"]), rel=1e-4)
    assert (frame["vlm"] == "tiny-qwen2.5-vl").all()
    assert (frame["model_id"] == "built:tiny-qwen2.5-vl").all()
    assert (frame["model_revision"] == "").all()
    assert (frame["label"] == frame["nota"]).all()  # the correct option removed: NOTA is the label
    assert [len(json.loads(options)) for options in frame["options"]] == [4, 4, 4, 5]  # q3's label was NOTA
    letters = ["".join(sorted(filter(None, json.loads(letter_map).values()))) for letter_map in frame["letter_map"]]
    assert letters == shown_letters
    assert [len(json.loads(p)) for p in frame["letter_probabilities"]] == [4, 4, 4, 5]
    assert all(logits in shown for logits, shown in zip(frame["prediction_logits"], letters, strict=True))
    # The tables read the stored texts again (`parsed_texts`), over the options as shown: as the job did.
    assert parsed_texts(frame).tolist() == frame["prediction_text"].tolist()
    assert counters == {
        "questions": 4,
        "answers": 4,
        "unparseable_text": int((frame["prediction_text"] == "").sum()),
        "text_and_logits_agree": int((frame["prediction_text"] == frame["prediction_logits"]).sum()),
        "reasoned": int(frame["reasoning"].astype(bool).sum()),
        "cut_off": int(frame["cut_off"].sum()),
        "computed_items": 4,
        "letters_from_text": 0,  # a local model's letters come from its logits
        "protocol": asked.protocol.params(),  # how it was asked, as the rule's params gave it
    }


@pytest.mark.slow
def test_one_job_answers_every_setting_as_a_job_per_setting_did(built_config, tmp_path):
    """All of a VLM's settings in one job (one model load, one image's questions together) give the answers a job
    per setting gave: the same texts and readings, the letter probabilities to float32's rounding (the batches,
    and so their padding, differ)."""
    from blindspot.models.spec import model_spec
    from blindspot.models.vlm_scoring import TransformersVLMScorer

    spec = model_spec(built_config, "tiny-qwen2.5-vl")
    scorer = TransformersVLMScorer(spec, batch_size=3)
    template = PromptTemplate.load(TEMPLATE)
    table = questions(tmp_path, 5)
    table["image_path"] = [table["image_path"][i - i % 2] for i in range(5)]  # q0, q1 share an image; q2, q3 too
    settings = {"original": ({}, template), "nota_only": ({"remove_correct": True}, template)}
    together, counters = answer_shard(table, settings, spec, lambda: scorer, letter_protocol(4), 3, tmp_path / "a.j")
    alone = pd.concat(
        [
            answer_shard(table, {name: shown}, spec, lambda: scorer, letter_protocol(4), 3, tmp_path / f"{name}.j")[0]
            for name, shown in settings.items()
        ],
        ignore_index=True,
    )
    assert (counters["questions"], counters["answers"]) == (5, 10)
    assert together["setting"].tolist() == ["original"] * 5 + ["nota_only"] * 5  # setting by setting, in order
    probabilities = ["letter_probabilities", "letter_mass"]
    pd.testing.assert_frame_equal(together.drop(columns=probabilities), alone.drop(columns=probabilities))
    for mine, theirs in zip(together["letter_probabilities"], alone["letter_probabilities"], strict=True):
        assert json.loads(mine) == pytest.approx(json.loads(theirs), rel=1e-4)
