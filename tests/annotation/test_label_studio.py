"""Label Studio both ways against the real server (marker `label_studio`, `./setup.sh --label-studio`):
for each task, push (project refusing empty annotations, showing the task's instructions before
labelling, local-files storage, tasks), images served, annotate through the API, import the built-in
page's export, pull, and read the labels back with each annotator's name; a value outside the label
config is refused on pull; and (marker `browser`) each task photographed in the labeling interface."""

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import requests
from helpers.screenshots import assert_side_by_side, chromium_page, save_screenshot, task_tables
from helpers.workflow import REPO
from PIL import Image

from blindspot.annotation import label_studio
from blindspot.annotation.labels import label_studio_export, read_labels
from blindspot.annotation.projects import load_project, make_project
from blindspot.annotation.server import DATABASE, LabelStore
from blindspot.prompts import PromptTemplate

pytestmark = [pytest.mark.label_studio, pytest.mark.integration, pytest.mark.slow]

VENV = Path(__file__).resolve().parents[2] / ".venv-label-studio"
OWNER = "owner@example.org"  # the user the server makes at start; the annotator "alice"
PASSWORD = "blindspot-test-password"
TOKEN = "blindspot-test-token"
EMAILS = {"alice": OWNER, "bob": "bob@example.org"}
RUBRIC = PromptTemplate.load(REPO / "config" / "prompts" / "judge_image_v1.yaml").rubric  # image_score's instructions
GIVEN = {"image_score": RUBRIC}
START_TIMEOUT_S = 600  # the first start migrates a new database: minutes on 2 busy cores


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The real Label Studio on 127.0.0.1, serving local files below a document root; yields its URL
    and the document root."""
    if not (VENV / "bin" / "label-studio").exists():
        pytest.skip(f"{VENV} is missing: run ./setup.sh --label-studio")
    base = tmp_path_factory.mktemp("label_studio")
    root = base / "documents"
    root.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "LABEL_STUDIO_BASE_DATA_DIR": str(base / "data"),
        "LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED": "true",
        "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT": str(root),
        "LABEL_STUDIO_USERNAME": OWNER,
        "LABEL_STUDIO_PASSWORD": PASSWORD,
        "LABEL_STUDIO_USER_TOKEN": TOKEN,
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
        "LATEST_VERSION_CHECK": "false",
    }
    log = (base / "server.log").open("w")
    process = subprocess.Popen(
        [
            str(VENV / "bin" / "label-studio"),
            "start",
            "--no-browser",
            "--internal-host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"Label Studio exited with {process.returncode}: see {base / 'server.log'}")
            try:
                if requests.get(f"{url}/health", timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"Label Studio did not answer in {START_TIMEOUT_S} s: see {base / 'server.log'}")
            time.sleep(1)
        client = label_studio.Client(url, TOKEN)
        client.call("POST", "/api/users/", json={"email": EMAILS["bob"], "username": "bob"})
        yield url, root
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


def picture(path: Path, colour: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (24, 24), colour).save(path)
    return str(path)


def tables(images: Path) -> dict[str, pd.DataFrame]:
    paths = {c: picture(images / c[0] / f"{c}.png", c) for c in ("red", "blue", "green")}
    return {
        "image_score": pd.DataFrame(
            {
                "image_id": ["i1", "i2"],
                "path": [paths["red"], paths["blue"]],
                "description": ["a red square", "a blue square"],
            }
        ),
        "pairwise": pd.DataFrame(
            {
                "pair_id": ["p1", "p2"],
                "neutral_prompt": ["a square", "a shape"],
                "left_role": ["corr", "adv"],
                "left_path": [paths["red"], paths["green"]],
                "right_path": [paths["blue"], paths["red"]],
            }
        ),
        "question_check": pd.DataFrame(
            {
                "question_id": ["q1", "q2"],
                "image_path": [paths["green"], paths["red"]],
                "question": ["What colour?", "What shape?"],
                "label": ["A", "B"],
                "options": [json.dumps(["green", "red", "None of the above"])] * 2,
            }
        ),
        # each item one annotator's (HumbleBench's human study); q2 as NOTA-only shows it
        "humble_answer": pd.DataFrame(
            {
                "item_id": ["original:q1", "nota_only:q2"],
                "annotator": ["alice", "bob"],
                "image_path": [paths["green"], paths["red"]],
                "question": ["What colour?", "What shape?"],
                "letters": ["ABC", "AC"],
                "options": [
                    json.dumps(["green", "red", "None of the above"]),
                    json.dumps(["round", "None of the above"]),
                ],
            }
        ),
    }


LABELS = {
    "image_score": {"alice": [("i1", {"score": 9}), ("i2", {"score": 2})], "bob": [("i1", {"score": 7})]},
    "pairwise": {
        "alice": [("p1", {"choice": "left"}), ("p2", {"choice": "neither"})],
        "bob": [("p2", {"choice": "right"})],
    },
    "question_check": {
        "alice": [("q1", {"decision": "keep", "edit": ""})],
        "bob": [("q2", {"decision": "modify", "edit": '{"label": "C"}'})],
    },
    "humble_answer": {"alice": [("original:q1", {"answer": "A"})], "bob": [("nota_only:q2", {"answer": "C"})]},
}


@pytest.mark.parametrize("task", ["image_score", "pairwise", "question_check", "humble_answer"])
def test_push_annotate_export_import_pull(server, task, tmp_path):
    url, root = server
    folder = tmp_path / "project"
    project = make_project(
        task, tables(root / task)[task], ["alice", "bob"], folder, "/data/local-files/?d=", instructions=GIVEN.get(task)
    )
    assert project["image_root"] == str(root)  # the default: the storage folder's parent, not itself
    project_id = label_studio.push(folder, url, TOKEN)
    client = label_studio.Client(url, TOKEN)
    created = client.call("GET", f"/api/projects/{project_id}")
    assert created["enable_empty_annotation"] is False
    # the task's instructions (image_score: the VLM filter's rubric), Label Studio's own, shown before labelling
    assert created["show_instruction"] is True
    assert created["expert_instruction"] == label_studio.instruction_html(project["instructions"])
    if task == "image_score":
        assert all(line in created["expert_instruction"] for line in RUBRIC.splitlines())
    tasks = client.call("GET", "/api/tasks/", params={"project": project_id, "fields": "all"})["tasks"]
    # every item once (the human study's come in each annotator's hashed order)
    assert sorted(t["data"]["item_id"] for t in tasks) == sorted(item["id"] for item in project["items"])
    for entry in tasks:  # every image a task shows is served, byte for byte
        item = next(i for i in project["items"] if i["id"] == entry["data"]["item_id"])
        for field, path in item["images"].items():
            response = client.session.get(url + entry["data"][field], timeout=30)
            assert response.status_code == 200, entry["data"][field]
            assert response.content == Path(path).read_bytes()

    # alice annotates in Label Studio, through the API (as the user the token belongs to)
    alice = pd.DataFrame([{"annotator": "alice", "item_id": i, **v} for i, v in LABELS[task]["alice"]])
    results = {e["data"]["item_id"]: e["annotations"] for e in label_studio_export(load_project(folder), alice)}
    for entry in tasks:
        for annotation in results[entry["data"]["item_id"]]:
            client.call("POST", f"/api/tasks/{entry['id']}/annotations/", json={"result": annotation["result"]})
    # bob labels on the built-in page; its export imports into Label Studio as bob's
    store = LabelStore(folder / DATABASE)
    for item, value in LABELS[task]["bob"]:
        store.put("bob", item, value)
    exported = tmp_path / "export.json"
    assert label_studio.export_labels(folder, exported, {"bob": EMAILS["bob"]}) == len(LABELS[task]["bob"])
    client.call("POST", f"/api/projects/{project_id}/import", json=json.loads(exported.read_text()))

    pulled = tmp_path / "pulled.json"
    count = label_studio.pull(folder, pulled, TOKEN, EMAILS)
    labels = read_labels(task, pulled)
    expected = pd.DataFrame(
        [{"annotator": who, "item_id": i, **v} for who in ("alice", "bob") for i, v in LABELS[task][who]]
    )
    key = ["annotator", "item_id"]
    assert count == len(expected)
    pd.testing.assert_frame_equal(
        labels.sort_values(key).reset_index(drop=True),
        expected.sort_values(key).reset_index(drop=True),
        check_dtype=False,
    )
    users = {a["completed_by"]["email"] for e in json.loads(pulled.read_text()) for a in e["annotations"]}
    assert users == set(EMAILS.values())


def test_pull_refuses_a_value_outside_the_label_config(server, tmp_path):
    url, root = server
    folder = tmp_path / "project"
    make_project("pairwise", tables(root / "refused")["pairwise"], ["alice"], folder, "/data/local-files/?d=")
    project_id = label_studio.push(folder, url, TOKEN)
    client = label_studio.Client(url, TOKEN)
    first = client.call("GET", "/api/tasks/", params={"project": project_id, "fields": "all"})["tasks"][0]
    result = [{"from_name": "choice", "to_name": "prompt", "type": "choices", "value": {"choices": ["both"]}}]
    client.call("POST", f"/api/tasks/{first['id']}/annotations/", json={"result": result})
    where = rf"task {first['data']['item_id']} \(Label Studio task {first['id']}\) by alice"
    with pytest.raises(ValueError, match=rf"{where}: \['both'\] is not one of left"):
        label_studio.pull(folder, tmp_path / "pulled.json", TOKEN, EMAILS)
    assert not (tmp_path / "pulled.json").exists()


# What an annotator must read on each task's labeling page, besides its images: texts, and the
# choices (shown with their hotkey, so found as a part of their element's text).
SHOWN = {
    "image_score": {"texts": ["a red square with the word red on it"], "choices": []},
    "pairwise": {"texts": ["a blue square", "Left", "Right"], "choices": ["left", "right", "neither"]},
    "question_check": {
        "texts": ["What colour is the square?", "Labelled correct", "A"],
        "choices": ["keep", "modify", "delete"],
    },
    "humble_answer": {"texts": ["What colour is the square?", "alice"], "choices": ["A", "C", "E"]},
}


def shown_images(page, count: int) -> list[dict]:
    """The boxes of the `count` images a labeling page shows (loaded, drawn large), left to right, once
    they stay put for half a second; fails when they do not load (Label Studio then shows an error box
    instead). Boxes, not elements: Label Studio replaces and moves its img elements while it settles."""
    shown = page.wait_for_function(
        """n => {
            const shown = [...document.images]
                .filter(i => i.naturalWidth > 0 && i.getBoundingClientRect().width > 100)
                .map(i => i.getBoundingClientRect().toJSON()).sort((a, b) => a.x - b.x);
            const settled = shown.length >= n && JSON.stringify(shown) === window.blindspotLastBoxes;
            window.blindspotLastBoxes = JSON.stringify(shown);
            return settled && shown;
        }""",
        arg=count,
        polling=500,
        timeout=60_000,
    ).json_value()
    assert len(shown) == count, shown
    return shown


@pytest.mark.browser
def test_each_task_in_the_labeling_interface(server, tmp_path):
    """Logged in as the admin, each task's first item opened in Label Studio's labeling interface: its
    images served and loaded (a pair's side by side, captioned Left and Right), its texts shown, and a
    screenshot `label-studio-<task>.png` in tests/helpers/screenshots.py's folder."""
    from playwright.sync_api import expect

    url, root = server
    client = label_studio.Client(url, TOKEN)
    with chromium_page() as page:
        page.goto(url + "/user/login/")
        page.fill("#email", OWNER)
        page.fill("#password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(lambda address: "/user/login" not in address)
        for task, shown in SHOWN.items():
            folder = tmp_path / task
            table = task_tables(root / f"screenshots-{task}")[task]
            project = make_project(task, table, ["alice"], folder, "/data/local-files/?d=", None, GIVEN.get(task))
            project_id = label_studio.push(folder, url, TOKEN)
            first = client.call("GET", "/api/tasks/", params={"project": project_id})["tasks"][0]
            page.goto(f"{url}/projects/{project_id}/data?task={first['id']}")  # the task in the labeling interface
            images = shown_images(page, len(project["items"][0]["images"]))
            labeling = page.locator(".lsf-main-view__annotation")  # the task being labelled, not the table beside it
            seen = [labeling.get_by_text(text, exact=True).first for text in shown["texts"]]
            for element in [*seen, *(labeling.get_by_text(choice).first for choice in shown["choices"])]:
                expect(element).to_be_in_viewport(ratio=1)  # whole, without scrolling the labeling panel
            if task == "pairwise":
                assert_side_by_side(*images)
                for caption, box in zip(("Left", "Right"), images, strict=True):  # each caption above its image
                    above = page.get_by_text(caption, exact=True).bounding_box()
                    assert box["x"] <= above["x"] < box["x"] + box["width"] / 2
                    # Label Studio draws the picture inside the img's box, a little below its top edge
                    assert above["y"] + above["height"] <= box["y"] + box["height"] / 2
            save_screenshot(page, f"label-studio-{task}")


def test_pull_refuses_an_answer_to_another_annotator_s_question(server, tmp_path):
    """Label Studio shows every task to every user: alice's answer to bob's question of the human study is
    refused when pulled, naming the task, her and him."""
    url, root = server
    folder = tmp_path / "project"
    make_project(
        "humble_answer", tables(root / "theirs")["humble_answer"], ["alice", "bob"], folder, "/data/local-files/?d="
    )
    project_id = label_studio.push(folder, url, TOKEN)
    client = label_studio.Client(url, TOKEN)
    listed = client.call("GET", "/api/tasks/", params={"project": project_id, "fields": "all"})["tasks"]
    bobs = next(entry for entry in listed if entry["data"]["annotator"] == "bob")
    result = [{"from_name": "answer", "to_name": "question", "type": "choices", "value": {"choices": ["A"]}}]
    client.call("POST", f"/api/tasks/{bobs['id']}/annotations/", json={"result": result})
    with pytest.raises(ValueError, match=r"task nota_only:q2 \(Label Studio task \d+\) by alice: the item is bob's"):
        label_studio.pull(folder, tmp_path / "pulled.json", TOKEN, EMAILS)
