"""Annotation projects: Label Studio export and import, the built-in page (labels survive a kill, text
is escaped, foreign tokens and unknown items are refused), and (marker `browser`) each task clicked
through in headless Chromium driven by Playwright."""

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from helpers.workflow import CHROMIUM, REPO
from markupsafe import escape
from PIL import Image

from blindspot.annotation import label_studio
from blindspot.annotation.labels import label_studio_export, pairwise_choices, read_labels
from blindspot.annotation.projects import (
    CONTROLS,
    HUMBLE_ANSWER_INSTRUCTIONS,
    LABEL_CONFIGS,
    PAIRWISE_INSTRUCTIONS,
    QUESTION_CHECK_INSTRUCTIONS,
    TASKS,
    load_project,
    make_project,
    task_items,
)
from blindspot.prompts import PromptTemplate

SCRIPT = '<script>alert("x")</script>'
RUBRIC = PromptTemplate.load(REPO / "config" / "prompts" / "judge_image_v1.yaml").rubric  # the VLM filter's
GIVEN = {"image_score": RUBRIC}  # the instructions a task has none of its own for


def picture(path: Path, colour: str) -> str:
    Image.new("RGB", (24, 24), colour).save(path)
    return str(path)


@pytest.fixture
def tables(tmp_path) -> dict[str, pd.DataFrame]:
    images = tmp_path / "images"
    images.mkdir()
    paths = {c: picture(images / f"{c}.png", c) for c in ("red", "blue", "green")}
    return {
        "image_score": pd.DataFrame(
            {
                "image_id": ["i1", "i2"],
                "path": [paths["red"], paths["blue"]],
                "description": ["a red square", f"a blue square {SCRIPT}"],
            }
        ),
        "pairwise": pd.DataFrame(
            {
                "pair_id": ["p1", "p2"],
                "neutral_prompt": [f"a square {SCRIPT}", "a shape"],
                "left_role": ["corr", "adv"],
                "left_path": [paths["red"], paths["green"]],
                "right_path": [paths["blue"], paths["red"]],
            }
        ),
        "question_check": pd.DataFrame(
            {
                "question_id": ["q1"],
                "image_path": [paths["green"]],
                "question": [f"What colour? {SCRIPT}"],
                "label": ["A"],
                "options": [json.dumps(["green", "red", "blue", "None of the above"])],
            }
        ),
        "humble_answer": pd.DataFrame(
            {
                "item_id": ["original:q1", "nota_only:q2"],
                "annotator": ["alice", "bob"],
                "image_path": [paths["green"], paths["red"]],
                "letters": ["ABCD", "ACD"],
                "question": [f"What colour? {SCRIPT}", "What shape?"],
                "options": [
                    json.dumps(["green", "red", "blue", "None of the above"]),
                    json.dumps(["round", "tall", "None of the above"]),
                ],
            }
        ),
    }


PEOPLE = {"humble_answer": ["alice", "bob"]}  # a task whose items are each one person's: both are annotators


def test_label_studio_projects_for_each_task(tables, tmp_path):
    for task in TASKS:
        project = make_project(
            task, tables[task], ["alice", "bob"], tmp_path / task, "/data/local-files/?d=", tmp_path, GIVEN.get(task)
        )
        tasks = json.loads((tmp_path / task / "tasks.json").read_text())
        assert [t["data"]["item_id"] for t in tasks] == [item["id"] for item in project["items"]]
        config = ET.fromstring((tmp_path / task / "label_config.xml").read_text())
        names = {element.get("name") for element in config.iter() if element.get("name")}
        variables = {
            element.get("value")[1:] for element in config.iter() if (element.get("value") or "").startswith("$")
        }
        assert variables <= set(tasks[0]["data"])  # every $field the config shows is in the task data
        assert names
        assert len(set(project["annotators"].values())) == 2
    pairwise = json.loads((tmp_path / "pairwise" / "tasks.json").read_text())
    assert pairwise[0]["data"]["left_image"] == "/data/local-files/?d=images/red.png"
    assert "left_role" not in pairwise[0]["data"]  # the annotator must not see which image is correct
    with pytest.raises(ValueError, match="distinct names"):
        make_project("pairwise", tables["pairwise"], ["a", "a"], tmp_path / "x", "", tmp_path)
    assert set(LABEL_CONFIGS) == set(TASKS)


def test_a_label_studio_export_is_read_back(tables, tmp_path):
    export = [
        {
            "id": 1,
            "data": {"item_id": "p1"},
            "annotations": [
                {
                    "completed_by": {"email": "alice@lab"},
                    "result": [{"from_name": "choice", "type": "choices", "value": {"choices": ["left"]}}],
                },
                {"completed_by": 7, "was_cancelled": True, "result": []},
                {
                    "completed_by": {"email": "bob@lab"},
                    "result": [{"from_name": "choice", "type": "choices", "value": {"choices": ["left"]}}],
                },
            ],
        },
        {
            "id": 2,
            "data": {"item_id": "p2"},
            "annotations": [
                {
                    "completed_by": {"email": "alice@lab"},
                    "result": [{"from_name": "choice", "type": "choices", "value": {"choices": ["left"]}}],
                },
                {
                    "completed_by": {"email": "bob@lab"},
                    "result": [{"from_name": "choice", "type": "choices", "value": {"choices": ["neither"]}}],
                },
            ],
        },
    ]
    (tmp_path / "export.json").write_text(json.dumps(export))
    labels = read_labels("pairwise", tmp_path / "export.json")
    assert len(labels) == 4  # the cancelled one is left out
    choices = pairwise_choices(labels, tables["pairwise"])
    # p1 shows corr on the left, p2 shows adv on the left
    assert list(choices["choice"]) == ["corr", "corr", "adv", "neither"]
    project = {"task": "pairwise", "items": [{"id": "p1"}, {"id": "p2"}]}
    (tmp_path / "again.json").write_text(json.dumps(label_studio_export(project, labels)))
    assert read_labels("pairwise", tmp_path / "again.json").equals(labels)
    with pytest.raises(ValueError, match="not in the subset: p9"):
        pairwise_choices(labels.assign(item_id="p9"), tables["pairwise"])
    (tmp_path / "export.csv").write_text("id,choice\n1,left\n")  # Label Studio's CSV export, named by mistake
    with pytest.raises(ValueError, match=r"export\.csv is not a JSON export \(Label Studio's JSON, not its CSV\)"):
        read_labels("pairwise", tmp_path / "export.csv")


class Server:
    """`blindspot annotate serve` in a subprocess on a free port."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.start()

    def start(self) -> None:
        command = [sys.executable, "-m", "blindspot.cli", "annotate", "serve", str(self.folder), "--port", "0"]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.links = {}
        for _ in load_project(self.folder)["annotators"]:
            name, link = self.process.stdout.readline().strip().split(": ", 1)
            self.links[name] = link

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def get(self, url: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def post(self, annotator: str, **form: str) -> int:
        data = urllib.parse.urlencode(form).encode()
        try:
            with urllib.request.urlopen(
                urllib.request.Request(self.links[annotator] + "/label", data), timeout=10
            ) as r:
                return r.status
        except urllib.error.HTTPError as error:
            return error.code


@pytest.fixture
def pairwise_server(tables, tmp_path):
    make_project("pairwise", tables["pairwise"], ["alice", "bob"], tmp_path / "project", "", tmp_path)
    server = Server(tmp_path / "project")
    yield server
    server.kill()


def exported(folder: Path, task: str, tmp_path: Path) -> pd.DataFrame:
    out = tmp_path / "labels.json"
    emails = ["--email", "alice=alice@lab.org", "--email", "bob=bob@lab.org"]
    subprocess.run(
        [sys.executable, "-m", "blindspot.cli", "annotate", "export", str(folder), str(out), *emails],
        check=True,
        capture_output=True,
    )
    return read_labels(task, out)


def test_labels_survive_a_killed_server(pairwise_server, tmp_path):
    assert pairwise_server.post("alice", item_id="p1", choice="left") == 200  # the redirect to the next item
    assert pairwise_server.post("bob", item_id="p1", choice="neither") == 200
    assert pairwise_server.post("alice", item_id="p2", choice="right") == 200
    pairwise_server.kill()
    pairwise_server.start()
    assert "alice: 2 of 2 labelled" in pairwise_server.get(pairwise_server.links["alice"])[1]
    labels = exported(pairwise_server.folder, "pairwise", tmp_path).sort_values(["annotator", "item_id"])
    assert labels[["annotator", "item_id", "choice"]].values.tolist() == [
        ["alice", "p1", "left"],
        ["alice", "p2", "right"],
        ["bob", "p1", "neither"],
    ]


def test_text_is_escaped_and_strangers_are_refused(pairwise_server):
    status, body = pairwise_server.get(pairwise_server.links["alice"])
    assert status == 200
    assert SCRIPT not in body
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in body
    assert f'<p id="instructions">{escape(PAIRWISE_INSTRUCTIONS)}</p>' in body  # the A.2 rubric, said once
    assert pairwise_server.post("alice", item_id="p9", choice="left") == 400  # unknown item
    assert pairwise_server.post("alice", item_id="p1", choice="maybe") == 400
    base = pairwise_server.links["alice"].rsplit("/", 1)[0]
    assert pairwise_server.get(base + "/not-a-token")[0] == 403
    assert pairwise_server.get(pairwise_server.links["alice"] + "?item=p9")[0] == 404
    assert pairwise_server.get(pairwise_server.links["alice"] + "/image/p1/other")[0] == 404
    assert pairwise_server.get(pairwise_server.links["alice"] + "/image/p1/left_image")[0] == 200
    pairwise_server.post("alice", item_id="p1", choice="left")
    assert "bob: 0 of 2 labelled" in pairwise_server.get(pairwise_server.links["bob"])[1]  # bob sees only his own


@pytest.mark.browser
@pytest.mark.slow
def test_each_task_clicked_through_in_chromium(tables, tmp_path):
    from playwright.sync_api import sync_playwright

    servers = {}
    for task in TASKS:
        make_project(task, tables[task], PEOPLE.get(task, ["alice"]), tmp_path / task, "", tmp_path, GIVEN.get(task))
        servers[task] = Server(tmp_path / task)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page = browser.new_page()
            dialogs = []
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

            page.goto(servers["image_score"].links["alice"])
            assert page.inner_text("#description") == "a red square"
            page.keyboard.press("7")  # a shortcut
            page.wait_for_selector("text=1 of 2 labelled")
            assert page.inner_text("#description") == f"a blue square {SCRIPT}"  # shown as text, not run
            page.click("button[name=score][value='10']")
            page.wait_for_selector("#finished")

            page.goto(servers["pairwise"].links["alice"])
            assert page.locator("#left").evaluate("img => img.naturalWidth") == 24  # the image loads
            page.keyboard.press("ArrowRight")
            page.wait_for_selector("text=1 of 2 labelled")
            page.click("button[value=neither]")
            page.wait_for_selector("#finished")

            page.goto(servers["question_check"].links["alice"])
            edit = {"question": "What colour is it?", "options": ["green", "red", "None of the above"], "label": "A"}
            page.fill("#edit", json.dumps(edit))
            page.keyboard.press("m")  # typed in the text box: not a shortcut there
            assert page.input_value("#edit").endswith("m")
            page.fill("#edit", json.dumps(edit))
            page.click("button[value=modify]")
            page.wait_for_selector("#finished")

            page.goto(servers["humble_answer"].links["alice"])  # alice's one question of the human study
            assert "alice: 0 of 1 labelled" in page.inner_text("#progress")
            page.keyboard.press("b")  # the letter's key
            page.wait_for_selector("#finished")
            browser.close()
        assert dialogs == []  # no injected script ran
    finally:
        for server in servers.values():
            server.kill()
    scores = exported(tmp_path / "image_score", "image_score", tmp_path)
    assert scores[["item_id", "score"]].values.tolist() == [["i1", 7], ["i2", 10]]
    choices = exported(tmp_path / "pairwise", "pairwise", tmp_path)
    assert pairwise_choices(choices, tables["pairwise"])["choice"].tolist() == ["adv", "neither"]
    decisions = exported(tmp_path / "question_check", "question_check", tmp_path)
    assert decisions["decision"].tolist() == ["modify"]
    assert json.loads(decisions["edit"].iloc[0]) == edit
    answers = exported(tmp_path / "humble_answer", "humble_answer", tmp_path)
    assert answers[["annotator", "item_id", "answer"]].values.tolist() == [["alice", "original:q1", "B"]]


def test_images_outside_the_image_root_and_projects_without_items(tables, tmp_path):
    with pytest.raises(ValueError, match=rf"must be below the image root {tmp_path / 'elsewhere'} \(Label Studio"):
        make_project("pairwise", tables["pairwise"], ["alice"], tmp_path / "q", "", tmp_path / "elsewhere")
    # no rows (every scene-graph candidate malformed, say): a project without items
    empty = make_project("question_check", tables["question_check"].iloc[:0], ["alice"], tmp_path / "e", "/files/?d=")
    assert empty["items"] == []
    assert json.loads((tmp_path / "e" / "tasks.json").read_text()) == []


def test_the_default_image_root_is_above_the_images_folder(tables, tmp_path):
    """Label Studio refuses a local-files storage at its document root: the storage is the images'
    folder and the root its parent; a root at the images' folder is refused with the reason."""
    project = make_project("pairwise", tables["pairwise"], ["alice"], tmp_path / "p", "/data/local-files/?d=")
    assert project["storage_path"] == str((tmp_path / "images").resolve())
    assert project["image_root"] == str(tmp_path.resolve())
    tasks = json.loads((tmp_path / "p" / "tasks.json").read_text())
    assert tasks[0]["data"]["left_image"] == "/data/local-files/?d=images/red.png"
    with pytest.raises(ValueError, match=r"must be below the image root .* not at it"):
        make_project("pairwise", tables["pairwise"], ["alice"], tmp_path / "q", "", tmp_path / "images")


def test_the_pairwise_config_shows_left_and_right_side_by_side():
    config = ET.fromstring(LABEL_CONFIGS["pairwise"])
    row = next(view for view in config.iter("View") if "display: flex" in (view.get("style") or ""))
    columns = list(row)
    assert [column.find("Header").get("value") for column in columns] == ["Left", "Right"]
    assert [column.find("Image").get("value") for column in columns] == ["$left_image", "$right_image"]


def test_an_export_carries_full_task_data_and_emails(tables, tmp_path):
    project = make_project("pairwise", tables["pairwise"], ["alice"], tmp_path / "p", "/data/local-files/?d=")
    labels = pd.DataFrame({"annotator": ["alice"], "item_id": ["p1"], "choice": ["left"]})
    export = label_studio_export(project, labels, {"alice": "alice@lab.org"})
    assert export[0]["data"] == json.loads((tmp_path / "p" / "tasks.json").read_text())[0]["data"]
    assert export[0]["annotations"][0]["completed_by"] == {"email": "alice@lab.org", "annotator": "alice"}
    (tmp_path / "export.json").write_text(json.dumps(export))
    assert read_labels("pairwise", tmp_path / "export.json")["annotator"].tolist() == ["alice"]


@pytest.mark.parametrize(
    ("task", "result", "message"),
    [
        ("image_score", {"from_name": "score", "type": "rating", "value": {"rating": 11}}, "score 11 is not"),
        ("image_score", {"from_name": "score", "type": "rating", "value": {"rating": "7"}}, "score '7' is not"),
        ("pairwise", {"from_name": "choice", "type": "choices", "value": {"choices": ["both"]}}, r"\['both'\]"),
        ("pairwise", {"from_name": "choice", "type": "choices", "value": {"choices": ["left", "right"]}}, "left"),
        ("question_check", {"from_name": "decision", "type": "choices", "value": {"choices": ["maybe"]}}, "maybe"),
        ("question_check", {"from_name": "decision", "type": "choices", "value": "keep"}, "None is not one of"),
    ],
)
def test_a_label_outside_the_config_is_refused_naming_task_and_value(task, result, message, tmp_path):
    export = tmp_path / "export.json"
    export.write_text(
        json.dumps([{"id": 1, "data": {"item_id": "x7"}, "annotations": [{"completed_by": 1, "result": [result]}]}])
    )
    with pytest.raises(ValueError, match=rf"export.json: task x7 \(Label Studio task 1\) by 1: .*{message}"):
        read_labels(task, export)


def test_each_config_requires_the_control_an_import_reads():
    for task, control in CONTROLS.items():
        element = next(e for e in ET.fromstring(LABEL_CONFIGS[task]).iter() if e.get("name") == control)
        assert element.get("required") == "true", task


EDIT_ONLY = [{"from_name": "edit", "to_name": "question", "type": "textarea", "value": {"text": ["x"]}}]


@pytest.mark.parametrize(
    ("task", "result", "message"),
    [
        ("image_score", [], r"no 'score' among the results \(none\)"),
        ("pairwise", [], r"no 'choice' among the results \(none\)"),
        ("question_check", EDIT_ONLY, r"no 'decision' among the results \(edit\)"),
    ],
)
def test_an_empty_or_partial_annotation_is_refused_naming_task_and_annotator(task, result, message, tmp_path):
    """What Label Studio saves when a project allows empty annotations: refused, not dropped; a
    cancelled (skipped) one is still left out."""
    export = tmp_path / "export.json"
    skipped = {"completed_by": {"email": "bob@lab"}, "was_cancelled": True, "result": []}
    export.write_text(json.dumps([{"id": 3, "data": {"item_id": "x7"}, "annotations": [skipped]}]))
    assert read_labels(task, export).empty
    empty = {"completed_by": {"email": "alice@lab"}, "was_cancelled": False, "result": result}
    export.write_text(json.dumps([{"id": 3, "data": {"item_id": "x7"}, "annotations": [skipped, empty]}]))
    with pytest.raises(ValueError, match=rf"^\S*export.json: task x7 \(Label Studio task 3\) by alice@lab: {message}"):
        read_labels(task, export)


def choice(who: str, value: str, **when) -> dict:
    return {"completed_by": {"email": who}, "result": [{"from_name": "choice", "value": {"choices": [value]}}], **when}


@pytest.mark.parametrize(
    ("newer", "older"),
    [
        (
            {"updated_at": "2025-03-02T09:00:00.120000Z", "created_at": "2025-03-01T09:00:00Z"},  # edited later
            {"updated_at": "2025-03-02T09:00:00+00:00", "created_at": "2025-03-02T08:00:00Z"},
        ),
        ({"created_at": "2025-03-02T10:00:00+01:00"}, {"created_at": "2025-03-02T08:30:00Z"}),  # the built-in page's
        ({"id": 12}, {"id": 9}),
        ({"id": 1}, {}),
    ],
)
def test_of_two_annotations_by_one_person_the_latest_is_kept_whatever_the_export_order(newer, older, tmp_path):
    export = tmp_path / "export.json"
    annotations = [
        choice("alice@lab", "right", **newer),
        choice("bob@lab", "left"),
        choice("alice@lab", "left", **older),
    ]
    export.write_text(json.dumps([{"id": 1, "data": {"item_id": "p1"}, "annotations": annotations}]))
    labels = read_labels("pairwise", export)
    assert labels.values.tolist() == [["alice@lab", "p1", "right"], ["bob@lab", "p1", "left"]]


def test_a_json_min_export_is_refused_saying_so(tmp_path):
    """Label Studio's JSON-MIN export: the task's data and each control's value at the top level, one
    record per annotation (label_studio_sdk's `Converter.convert_to_json_min`)."""
    record = {
        "item_id": "p1",
        "prompt": "a square",
        "left_image": "/data/local-files/?d=images/red.png",
        "right_image": "/data/local-files/?d=images/blue.png",
        "id": 1,
        "choice": "left",
        "annotator": 1,
        "annotation_id": 1,
        "created_at": "2025-03-02T09:00:00.120000Z",
        "updated_at": "2025-03-02T09:00:00.120000Z",
        "lead_time": 3.2,
    }
    export = tmp_path / "export.json"
    export.write_text(json.dumps([record]))
    with pytest.raises(
        ValueError, match=r"export.json: a JSON-MIN export .*: export JSON from Label Studio, or use"
    ) as error:
        read_labels("pairwise", export)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("annotations", [None, []])
def test_a_task_without_annotations_gives_no_labels(tmp_path, annotations):
    export = tmp_path / "export.json"
    export.write_text(json.dumps([{"id": 1, "data": {"item_id": "p1"}, "annotations": annotations}]))
    assert read_labels("pairwise", export).empty


@pytest.mark.parametrize("annotations", ["left", ["left"], {"result": []}])
def test_annotations_that_are_not_label_studio_annotations_are_one_line(tmp_path, annotations):
    export = tmp_path / "export.json"
    export.write_text(json.dumps([{"id": 1, "data": {"item_id": "p1"}, "annotations": annotations}]))
    with pytest.raises(ValueError, match=r"export.json: task p1 \(Label Studio task 1\)'s annotations are not a list"):
        read_labels("pairwise", export)


def test_a_table_of_another_task_is_named_as_such(tables):
    with pytest.raises(ValueError, match=r"^task pairwise needs a table with columns pair_id, .* lacks pair_id, "):
        task_items("pairwise", tables["image_score"])


def test_an_unknown_pairwise_choice_is_refused(tables):
    labels = pd.DataFrame({"annotator": ["a"], "item_id": ["p1"], "choice": ["both"]})
    with pytest.raises(ValueError, match="pair p1: choice 'both' is not one of left"):
        pairwise_choices(labels, tables["pairwise"])


def test_annotators_need_a_label_studio_email():
    from blindspot.annotation.label_studio import annotator_emails, parse_emails

    emails = parse_emails(["alice=alice@lab.org"])
    found = annotator_emails(["alice", "bob@lab.org"], emails)
    assert found == {"alice": "alice@lab.org", "bob@lab.org": "bob@lab.org"}
    with pytest.raises(ValueError, match="annotator 'carol' has no Label Studio email: pass --email carol=EMAIL"):
        annotator_emails(["carol"], emails)
    with pytest.raises(ValueError, match="'alice' is not NAME=EMAIL"):
        parse_emails(["alice"])


def test_each_project_carries_its_instructions_written_once(tables, tmp_path):
    """image_score: the VLM filter's rubric, as given (the judge template's); pairwise: ProtoBias's A.2
    rubric; question_check: its one question. Stored in project.json; the label configs keep only a
    short header, not a second, different wording (such as a 1-10 scale of their own)."""
    with pytest.raises(ValueError, match="image_score needs instructions"):
        make_project("image_score", tables["image_score"], ["alice"], tmp_path / "none", "", tmp_path)
    expected = {
        "image_score": RUBRIC,
        "pairwise": PAIRWISE_INSTRUCTIONS,
        "question_check": QUESTION_CHECK_INSTRUCTIONS,
        "humble_answer": HUMBLE_ANSWER_INSTRUCTIONS,
    }
    for task in TASKS:
        people = PEOPLE.get(task, ["alice"])
        project = make_project(task, tables[task], people, tmp_path / task, "", tmp_path, GIVEN.get(task))
        assert project["instructions"] == load_project(tmp_path / task)["instructions"] == expected[task]
        headers = [e.get("value") for e in ET.fromstring(LABEL_CONFIGS[task]).iter("Header") if e.get("size") is None]
        assert len(headers) == 1
        assert "(see Instructions)" in headers[0]  # Label Studio's button, beside the one shown before labelling
    assert "1 = not at all" not in LABEL_CONFIGS["image_score"]
    for detail in (
        "counts",
        "colours",
        "spatial relations",
        "foreground and background",
        "more typical",
        "similarly valid, or similarly invalid",
        '"neither" (no clear preference)',
    ):
        assert detail in PAIRWISE_INSTRUCTIONS
    other = make_project("pairwise", tables["pairwise"], ["alice"], tmp_path / "other", "", tmp_path, "Pick one.")
    assert other["instructions"] == "Pick one."
    with pytest.raises(ValueError, match="pairwise needs instructions"):
        make_project("pairwise", tables["pairwise"], ["alice"], tmp_path / "blank", "", tmp_path, "  \n")


def test_label_studio_instructions_are_escaped_html_with_the_line_breaks(tables, tmp_path, monkeypatch):
    """`push` gives Label Studio the project's instructions as its own (`expert_instruction`, HTML it
    shows unescaped) and `show_instruction`, so annotators see them before labelling."""
    assert label_studio.instruction_html("One <b>&\nline two.\n\n  Two.\n") == (
        "<p>One &lt;b&gt;&amp;<br>\nline two.</p>\n<p>Two.</p>"
    )
    make_project("image_score", tables["image_score"], ["alice"], tmp_path / "p", "/files/?d=", tmp_path, RUBRIC)
    calls = []

    def call(self, method, path, **kwargs):
        calls.append((method, path, kwargs.get("json")))
        return {"id": 7}

    monkeypatch.setattr(label_studio.Client, "call", call)
    assert label_studio.push(tmp_path / "p", "http://127.0.0.1:1", "token") == 7
    created = next(payload for method, path, payload in calls if path == "/api/projects/")
    assert created["show_instruction"] is True
    assert created["expert_instruction"] == "<p>" + "<br>\n".join(RUBRIC.splitlines()) + "</p>"
    assert created["label_config"] == LABEL_CONFIGS["image_score"]
    project = json.loads((tmp_path / "p" / "project.json").read_text())
    del project["instructions"]  # a project made before projects carried their instructions
    (tmp_path / "p" / "project.json").write_text(json.dumps(project))
    with pytest.raises(ValueError, match=r"project\.json has no instructions for annotators: make the project again"):
        label_studio.push(tmp_path / "p", "http://127.0.0.1:1", "token")


def test_a_project_made_before_projects_carried_instructions_gets_its_tasks_own(tmp_path):
    """Remaking it would give every annotator a new link; only image_score has no instructions of its own."""
    from blindspot.annotation.projects import project_instructions

    assert project_instructions({"task": "pairwise"}, tmp_path) == PAIRWISE_INSTRUCTIONS
    assert project_instructions({"task": "question_check"}, tmp_path) == QUESTION_CHECK_INSTRUCTIONS
    with pytest.raises(ValueError, match=r"project\.json has no instructions for annotators: make the project again"):
        project_instructions({"task": "image_score"}, tmp_path)


def test_bad_annotation_inputs_are_one_line_naming_them(tables, tmp_path, capsys):
    from blindspot.annotation.server import DATABASE
    from blindspot.cli import main

    def error(*argv: str) -> str:
        with pytest.raises(SystemExit) as exit_:
            main(["annotate", *argv])
        assert exit_.value.code == 2
        return capsys.readouterr().err.splitlines()[-1].split(": error: ", 1)[1]  # after "blindspot[ annotate X]"

    items, taken = tmp_path / "items.parquet", tmp_path / "a file"
    tables["image_score"].assign(path=[tables["image_score"]["path"][0], None]).to_parquet(items)
    taken.write_text("")
    make = [
        "make",
        "--task",
        "image_score",
        "--annotators",
        "alice",
        "--judge-template",
        str(REPO / "config" / "prompts" / "judge_image_v1.yaml"),
    ]
    assert error(*make, "--items", str(items), "--out", str(tmp_path / "p")) == (
        "task image_score: row 1 of the table has no path"
    )
    tables["image_score"].to_parquet(items)
    assert error(*make, "--items", str(items), "--out", str(taken)) == f"{taken}: Not a directory"
    assert error(*make, "--items", str(tmp_path / "none.parquet"), "--out", str(tmp_path / "p")) == (
        f"{tmp_path / 'none.parquet'}: no such file"
    )
    assert error("export", str(tmp_path), str(tmp_path / "out.json")) == (
        f"{tmp_path}: not a project folder (no project.json): make one with `blindspot annotate make`"
    )
    project = tmp_path / "project"
    make_project("pairwise", tables["pairwise"], ["alice"], project, "/data/local-files/?d=")
    assert error("export", str(project), str(tmp_path)) == f"{tmp_path}: Is a directory"  # a folder as the file
    assert error("serve", str(project), "--port", "99999") == (
        "argument --port: '99999' is not a port (a whole number from 0 to 65535)"
    )
    (project / DATABASE).write_text("labels, but not in SQLite")
    assert error("export", str(project), str(tmp_path / "out.json")) == (
        f"{project / DATABASE}: not the project's label database (file is not a database)"
    )
    (project / "project.json").write_text(json.dumps({"task": "pairwise"}))
    assert error("export", str(project), str(tmp_path / "out.json")).startswith(
        f"{project / 'project.json'}: no items, annotators, image_root, storage_path, image_url_prefix: "
    )
    assert not list(tmp_path.glob(".*.tmp"))
    assert not (tmp_path / "out.json").exists()
