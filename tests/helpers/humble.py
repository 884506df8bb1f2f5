import json

import pandas as pd
from PIL import Image

from blindspot import schemas
from blindspot.humblebench.parsing import PARSER_VERSION
from blindspot.humblebench.questions import question_row
from blindspot.humblebench.settings import Question
from blindspot.io import write_table
from blindspot.registry import AnswerProtocol, Decoding
from helpers.workflow import REPO

FIVE_SHOWN = json.dumps({letter: letter for letter in "ABCDE"})
FIVE_OPTIONS = json.dumps(["a cat", "a dog", "a bird", "a fish", "None of the above"])


OPTIONS = ("red", "green", "blue", "yellow", "None of the above")


TEMPLATE = REPO / "config" / "prompts" / "humble_original_v4.yaml"
LETTER_PROMPT = REPO / "config" / "prompts" / "humble_letter_v1.yaml"


def letter_protocol(max_tokens: int) -> AnswerProtocol:
    """The letter prompt, greedy, `max_tokens` long: the uniform protocol."""
    return AnswerProtocol("uniform", str(LETTER_PROMPT), "", Decoding(), max_tokens)


def questions(folder, n: int) -> pd.DataFrame:
    rows = []
    for i in range(n):
        path = folder / f"{i}.png"
        Image.new("RGB", (32 + 8 * i, 32), ["red", "green", "blue"][i % 3]).save(path)
        question = Question(f"q{i}", "What colour is the car?", OPTIONS, "ABCE"[i % 4], "Attribute")
        rows.append(question_row(question, "benchmark", str(path), {}, verified=True))
    return pd.DataFrame(rows, columns=schemas.HUMBLE_QUESTIONS.names)


SETTINGS = {
    "original": {"label": "Original", "headline": "overall"},
    "nota_only": {"label": "NOTA-only", "headline": "nota_hit"},
}


def answers() -> pd.DataFrame:
    """Two VLMs, two settings, four questions, in the answer table's columns."""
    rows = []
    for vlm, text, logits in (("vlm-a", "AEEB", "ABEB"), ("vlm-b", "ACE", "AEEA")):
        for setting in SETTINGS:
            for i, question in enumerate(["q1", "q2", "q3", "q4"]):
                label = "E" if setting == "nota_only" or question == "q2" else "A"
                rows.append(
                    {
                        "question_id": question,
                        "vlm": vlm,
                        "model_id": vlm,
                        "model_revision": "",
                        "setting": setting,
                        "type": ["Object", "Relation", "Attribute", "Object"][i],
                        "options": FIVE_OPTIONS,
                        "label": label,
                        "nota": "E",
                        "letter_map": FIVE_SHOWN,
                        "noise_image": False,
                        "letter_probabilities": "[]",
                        "letter_mass": 1.0,
                        "prediction_logits": logits[i],
                        "text": text[i : i + 1],
                        "prediction_text": text[i : i + 1],
                        "reasoning": "",
                        "stopped": True,
                        "cut_off": False,
                        "template_version": "v1",
                        "prompt_version": "v1",
                        "protocol": "official",
                    }
                )
    return pd.DataFrame(rows, columns=schemas.HUMBLE_ANSWERS.names)


def write_answers(folder, frame):
    """The answer tables of `frame`, one per VLM, as the answer step writes them."""
    paths = []
    for vlm, part in frame.groupby("vlm"):
        paths.append(str(folder / f"{vlm}.parquet"))
        write_table(paths[-1], part, schemas.HUMBLE_ANSWERS)
    return paths


def write_questions(folder, answers_frame, images=None):
    """The questions table of the questions `answers_frame` answers, each about `images[question_id]` (default: an
    image of its own), as the question step writes it; its path."""
    ids = sorted(set(answers_frame["question_id"]))
    questions = pd.DataFrame({name: [""] * len(ids) for name in schemas.HUMBLE_QUESTIONS.names})
    questions = questions.assign(
        question_id=ids, image_path=[(images or {}).get(q, f"{q}.png") for q in ids], verified=True
    )
    write_table(folder / "questions.parquet", questions, schemas.HUMBLE_QUESTIONS)
    return str(folder / "questions.parquet")


def make_tables(folder, paths, humans=True, parser_version=PARSER_VERSION, groups=None):
    from blindspot.io import read_table
    from blindspot.steps.humble import make_humble_tables

    def files(name):
        return [str(folder / f"{name}.{ext}") for ext in ("csv", "md", "tex")]

    answered = pd.concat([read_table(path, schemas.HUMBLE_ANSWERS) for path in paths])
    make_humble_tables(
        answers=paths,
        questions=write_questions(folder, answered),
        human_answers=[str(folder / "humans.csv")] if humans else [],
        human_study=[],
        reading="text",
        settings=SETTINGS,
        original="original",
        stress="nota_only",
        cautious="nota_only",
        metrics=str(folder / "metrics.csv"),
        table4=files("t4"),
        table5=files("t5"),
        table6=files("t6"),
        table7=files("t7") if humans else [],
        table_a1=files("ta1"),
        table_a2=files("ta2"),
        plot=str(folder / "nota.png"),
        parser_version=parser_version,
        groups=groups,
        sample=[],
        bootstrap={"n_boot": 200, "seed": 0},
        comparisons=[str(folder / "comparisons.csv"), str(folder / "comparisons.md")],
    )


RELEASE_TEXT = "What is the man holding?\nA. an umbrella\nB. a phone\nC. a cup\nD. a bag\nE. None of the above"


RELEASE_RECORDS = [
    {"question_id": 1, "question": RELEASE_TEXT, "label": "B", "type": "Object", "colour": "red"},
    {"question_id": 2, "question": RELEASE_TEXT, "label": "E", "type": "Relation", "colour": "blue"},
    {"question_id": 3, "question": RELEASE_TEXT, "label": "A", "type": "Attribute", "colour": "red"},  # red again
]


def imagefolder(folder):
    """The hub's imagefolder layout (maifoundations/HumbleBench): images, and a metadata.jsonl naming each
    question's image in `file_name` relative to itself."""
    (folder / "images").mkdir(parents=True)
    lines = []
    for record in RELEASE_RECORDS:
        Image.new("RGB", (8, 8), record["colour"]).save(folder / "images" / f"{record['colour']}.png")
        fields = {k: v for k, v in record.items() if k != "colour"}
        lines.append(json.dumps({"file_name": f"images/{record['colour']}.png"} | fields))
    (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "README.md").write_text("---\nlicense: mit\n---\n")
    return folder


# The options of the questions tests/humblebench/test_humble_sources.py writes from a benchmark.
SOURCE_OPTIONS = ("red", "blue", "green", "white", "None of the above")
