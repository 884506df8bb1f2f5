"""The built-in annotation page under abuse: oversized, mistyped, mis-sized, undecodable and stalled
requests get a clear 4xx (never a dropped connection), a room of annotators posting at once loses
nothing, scores and question edits are checked, and images are read only from under the image root,
wherever the server was started; and (marker `browser`) each task photographed as an annotator sees it."""

import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlencode

import pandas as pd
import pytest
from helpers.screenshots import (
    PICTURE_SIZE,
    assert_side_by_side,
    chromium_page,
    loaded_width,
    save_screenshot,
    task_tables,
)
from helpers.workflow import REPO
from markupsafe import escape
from PIL import Image

from blindspot.annotation.label_studio import export_labels
from blindspot.annotation.labels import read_labels
from blindspot.annotation.projects import load_project, make_project
from blindspot.annotation.server import (
    DATABASE,
    MAX_BODY_BYTES,
    LabelStore,
    parse_value,
    serve,
)
from blindspot.io import write_json
from blindspot.prompts import PromptTemplate

FORM = "application/x-www-form-urlencoded"
RUBRIC = PromptTemplate.load(REPO / "config" / "prompts" / "judge_image_v1.yaml").rubric  # image_score's instructions


@pytest.fixture
def images(tmp_path) -> Path:
    """Two pictures in root/images: the project's image root is root, its parent (`make_project`'s default)."""
    folder = tmp_path / "root" / "images"
    folder.mkdir(parents=True)
    for colour in ("red", "blue"):
        Image.new("RGB", (8, 8), colour).save(folder / f"{colour}.png")
    return folder


def pairwise_project(images: Path, folder: Path) -> dict:
    table = pd.DataFrame(
        {
            "pair_id": ["p1"],
            "neutral_prompt": ["a square"],
            "left_role": ["corr"],
            "left_path": [str(images / "red.png")],
            "right_path": [str(images / "blue.png")],
        }
    )
    return make_project("pairwise", table, ["alice"], folder, "")


@contextmanager
def running(folder: Path, **options: float) -> Iterator[tuple[int, str]]:
    """The page of a project served from a thread: its port and alice's path."""
    server = serve(folder, port=0, **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        token = next(iter(load_project(folder)["annotators"].values()))
        yield server.server_address[1], f"/a/{token}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def page(images, tmp_path) -> Iterator[tuple[int, str]]:
    pairwise_project(images, tmp_path / "project")
    with running(tmp_path / "project") as served:
        yield served


def exchange(port: int, request: bytes, wait: float = 10) -> bytes:
    """Send raw bytes, read until the server closes; a server that never answers fails the test."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


def post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    answer = exchange(port, f"POST {path}/label HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode() + body)
    assert answer, "the connection was dropped without an answer"
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.decode(errors="replace")


def form(body: bytes, **extra: str) -> dict[str, str]:
    return {"Content-Type": FORM, "Content-Length": str(len(body)), **extra}


def labels(folder: Path) -> pd.DataFrame:
    return LabelStore(folder / "labels.sqlite").frame()


def test_a_large_form_is_refused_with_413_and_the_connection_is_not_reset(page, tmp_path):
    port, path = page
    padded = b"item_id=p1&choice=left&pad=" + b"x" * 10_000_000
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("POST", path + "/label", padded, {"Content-Type": FORM})  # the whole body is sent
    response = connection.getresponse()
    assert response.status == 413
    assert f"at most {MAX_BODY_BYTES}" in response.read().decode()
    fields = "&".join(f"f{n}=" for n in range(100)).encode() + b"&item_id=p1&choice=left"
    status, body = post(port, path, fields, form(fields))
    assert (status, "more than 8 fields" in body) == (400, True)
    assert labels(tmp_path / "project").empty


def test_a_form_must_be_url_encoded(page):
    port, path = page
    body = b"item_id=p1&choice=left"
    for content_type in ("application/json", "text/plain", "multipart/form-data; boundary=x"):
        assert post(port, path, body, form(body, **{"Content-Type": content_type}))[0] == 415
    assert post(port, path, body, form(body, **{"Content-Type": FORM + "; charset=UTF-8"}))[0] == 303


def test_a_missing_or_bad_content_length_or_a_body_that_is_not_utf8_gets_a_clear_answer(page, tmp_path):
    port, path = page
    body = b"item_id=p1&choice=left"
    assert post(port, path, body, {"Content-Type": FORM})[0] == 411
    assert post(port, path, body, {"Content-Type": FORM, "Transfer-Encoding": "chunked"})[0] == 411
    for length in ("abc", "-1", "1e3", "+22", "\uff12\uff12", "99999999999999999999"):
        status, answer = post(port, path, body, form(body, **{"Content-Length": length}))
        assert (status, "is not a size" in answer) == (400, True), length
    status, answer = post(port, path, body, form(body, **{"Content-Length": "22, 22"}))
    assert (status, "is not a size" in answer) == (400, True)
    raw = b"item_id=p1&choice=left\xff"
    status, answer = post(port, path, raw, form(raw))
    assert (status, "not UTF-8" in answer) == (400, True)
    escaped = b"item_id=p1%FF&choice=left"
    assert post(port, path, escaped, form(escaped))[0] == 400
    twice = b"item_id=p1&choice=left&choice=right"
    assert post(port, path, twice, form(twice))[0] == 400
    assert labels(tmp_path / "project").empty


def test_a_stalled_client_is_let_go(images, tmp_path):
    pairwise_project(images, tmp_path / "project")
    with running(tmp_path / "project", connection_timeout=0.5) as (port, path):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
            started = time.monotonic()
            idle.sendall(b"GET " + path.encode())  # and nothing more
            assert idle.recv(1024) == b""  # closed by the server
            assert time.monotonic() - started < 5
        body = b"item_id=p1&choice=left"
        head = f"POST {path}/label HTTP/1.1\r\nContent-Type: {FORM}\r\nContent-Length: {len(body)}\r\n\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as stalled:
            stalled.sendall(head.encode() + body[:5])  # half a form
            answer = stalled.recv(1024)
        assert answer.startswith(b"HTTP/1.0 408"), answer
    assert labels(tmp_path / "project").empty


def test_two_hundred_annotators_posting_at_once_lose_nothing(images, tmp_path):
    annotators = [f"a{n:03d}" for n in range(200)]
    table = pd.DataFrame({"image_id": ["i1"], "path": [str(images / "red.png")], "description": ["red"]})
    project = make_project("image_score", table, annotators, tmp_path / "project", "", instructions=RUBRIC)
    start = threading.Barrier(len(annotators))
    answers: dict[str, object] = {}

    def submit(name: str, port: int) -> None:
        body = urlencode({"item_id": "i1", "score": str(1 + int(name[1:]) % 10)}).encode()
        request = (
            f"POST /a/{project['annotators'][name]}/label HTTP/1.1\r\nContent-Type: {FORM}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        start.wait()
        try:
            answers[name] = exchange(port, request, wait=60)[:12]
        except OSError as error:
            answers[name] = error

    with running(tmp_path / "project") as (port, _):
        threads = [threading.Thread(target=submit, args=(name, port)) for name in annotators]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    failed = {name: answer for name, answer in answers.items() if answer != b"HTTP/1.0 303"}
    assert failed == {}
    export_labels(tmp_path / "project", tmp_path / "labels.json", {name: f"{name}@example.org" for name in annotators})
    stored = read_labels("image_score", tmp_path / "labels.json")
    assert sorted(stored["annotator"]) == annotators  # none lost, none twice
    assert all(stored["score"] == 1 + stored["annotator"].str[1:].astype(int) % 10)


def test_scores_take_ascii_digits_only():
    assert parse_value("image_score", {"score": "10"}) == {"score": 10}
    for score in ("\uff11\uff10", "\u0663", "²", " 7", "07.0", "0", "11", ""):
        with pytest.raises(ValueError, match="ASCII digits"):
            parse_value("image_score", {"score": score})


def modify(edit: str) -> dict:
    return parse_value("question_check", {"item_id": "q1", "decision": "modify", "edit": edit})


GOOD_EDIT = {"question": "What colour?", "options": ["green", "red", "None of the above"], "label": "A"}


def test_a_question_edit_is_stored_as_checked_json():
    assert json.loads(modify(json.dumps(GOOD_EDIT))["edit"]) == GOOD_EDIT
    assert parse_value("question_check", {"item_id": "q1", "decision": "keep", "edit": "stray"})["edit"] == ""


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(["question", "options", "label"], id="a list"),
        pytest.param("question options label", id="a string"),
        pytest.param({"question": 5, "options": "red", "label": []}, id="wrong types"),
        pytest.param(GOOD_EDIT | {"options": [1, 2, "None of the above"]}, id="options not strings"),
        pytest.param(GOOD_EDIT | {"options": ["green", "red"]}, id="no NOTA"),
        pytest.param(GOOD_EDIT | {"label": "E"}, id="a label out of range"),
        pytest.param(GOOD_EDIT | {"type": "Colour"}, id="an unknown type"),
        pytest.param(GOOD_EDIT | {"answer": "A"}, id="an extra field"),
    ],
)
def test_a_question_edit_must_be_a_question(edit):
    with pytest.raises(ValueError, match=r"edit|question q1"):
        modify(json.dumps(edit))


@pytest.mark.parametrize("text", ["[" * 100_000, '{"question": ' * 100_000, "1" * 5000, "{"])
def test_an_edit_nested_too_deep_or_not_json_is_refused(text):
    with pytest.raises(ValueError, match="as JSON"):
        modify(text)


def test_a_deeply_nested_edit_over_http_is_a_400(images, tmp_path):
    table = pd.DataFrame(
        {
            "question_id": ["q1"],
            "image_path": [str(images / "red.png")],
            "question": ["Colour?"],
            "label": ["A"],
            "options": [json.dumps(["red", "blue", "None of the above"])],
        }
    )
    make_project("question_check", table, ["alice"], tmp_path / "project", "")
    with running(tmp_path / "project") as (port, path):
        body = f"item_id=q1&decision=modify&edit={quote('[' * 15_000)}".encode()
        assert len(body) < MAX_BODY_BYTES
        status, answer = post(port, path, body, form(body))
        assert (status, "as JSON" in answer) == (400, True)
    assert labels(tmp_path / "project").empty


def test_an_image_linked_out_of_the_image_root_or_missing_is_refused(page, images, tmp_path):
    port, path = page
    secret = tmp_path / "outside" / "secret.png"  # not under the image root, tmp_path/root
    secret.parent.mkdir()
    Image.new("RGB", (8, 8), "black").save(secret)
    (images / "red.png").unlink()
    (images / "red.png").symlink_to(secret)  # a link inside the image root, to a file outside it
    status, _ = get(port, path + "/image/p1/left_image")
    assert status == 404
    (images / "blue.png").unlink()
    assert get(port, path + "/image/p1/right_image")[0] == 404


def get(port: int, path: str) -> tuple[int, bytes]:
    answer = exchange(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert answer, "the connection was dropped without an answer"
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_relative_image_paths_are_relative_to_the_project_folder(images, tmp_path, monkeypatch):
    folder = tmp_path / "project"
    project = pairwise_project(images, folder)
    for item in project["items"]:
        item["images"] = {field: os.path.relpath(file, folder) for field, file in item["images"].items()}
    write_json(folder / "project.json", project)
    elsewhere = tmp_path / "elsewhere" / "deeper"  # where the paths, taken from here, lead nowhere
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    with running(folder) as (port, path):
        status, body = get(port, path + "/image/p1/left_image")
    assert status == 200
    assert body == (images / "red.png").read_bytes()


def test_a_project_made_from_relative_paths_is_served_from_any_folder(images, tmp_path, monkeypatch):
    """The workflow's tables hold paths relative to where it ran: the project keeps them absolute."""
    monkeypatch.chdir(images.parent)
    table = pd.DataFrame(
        {
            "pair_id": ["p1"],
            "neutral_prompt": ["a square"],
            "left_role": ["corr"],
            "left_path": ["images/red.png"],
            "right_path": ["images/blue.png"],
        }
    )
    make_project("pairwise", table, ["alice"], tmp_path / "project", "")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with running(tmp_path / "project") as (port, path):
        status, body = get(port, path + "/image/p1/right_image")
    assert status == 200
    assert body == (images / "blue.png").read_bytes()


# What an annotator must see of each task: its images (loaded), its texts, its buttons.
SHOWN = {
    "image_score": {
        "images": ["#image"],
        "texts": {"#description": "a red square with the word red on it"},
        "buttons": [str(score) for score in range(1, 11)],
    },
    "pairwise": {
        "images": ["#left", "#right"],
        "texts": {"#prompt": "a blue square", "#left-caption": "Left", "#right-caption": "Right"},
        "buttons": ["Left", "Right", "Neither / no clear preference"],
    },
    "question_check": {
        "images": ["#image"],
        "buttons": ["Keep", "Modify", "Delete"],
        "texts": {
            "#question": "What colour is the square?",
            "#answer": "A",
            "#options": "A. green\nB. red\nC. blue\nD. None of the above",
        },
    },
    "humble_answer": {
        "images": ["#image"],
        "buttons": ["A", "C", "E"],
        "texts": {"#question": "What colour is the square?", "#options": "A. red\nC. blue\nE. None of the above"},
    },
}


@pytest.mark.browser
@pytest.mark.parametrize("task", list(SHOWN))
def test_each_task_as_an_annotator_sees_it(task, tmp_path):
    """A screenshot of each task's page (`builtin-<task>.png` in tests/helpers/screenshots.py's folder), and
    everything on it in view without scrolling: the images loaded (a pair's side by side), the
    texts, the buttons."""
    project = make_project(
        task,
        task_tables(tmp_path / "root" / "images")[task],
        ["alice"],
        tmp_path / "project",
        "",
        instructions=RUBRIC if task == "image_score" else None,
    )
    with running(tmp_path / "project") as (port, path), chromium_page() as page:
        page.goto(f"http://127.0.0.1:{port}{path}")
        images = [page.locator(selector) for selector in SHOWN[task]["images"]]
        assert all(loaded_width(image) == PICTURE_SIZE for image in images)
        if task == "pairwise":
            assert_side_by_side(*(image.bounding_box() for image in images))
            for side, image in zip(("left", "right"), images, strict=True):  # each caption right above its image
                caption, box = page.locator(f"#{side}-caption").bounding_box(), image.bounding_box()
                assert caption["x"] == box["x"]
                assert caption["y"] + caption["height"] <= box["y"] < caption["y"] + 50
        for selector, text in SHOWN[task]["texts"].items():
            assert page.inner_text(selector) == text
        assert page.inner_text("#instructions") == project["instructions"]  # with its line breaks
        buttons = [page.get_by_role("button", name=name, exact=True) for name in SHOWN[task]["buttons"]]
        in_view = page.viewport_size["height"]
        for element in [*images, *buttons, page.locator("#progress"), page.locator("#instructions")]:
            box = element.bounding_box()
            assert box is not None, element
            assert box["y"] + box["height"] <= in_view, (element, box)
        save_screenshot(page, f"builtin-{task}")


def test_every_item_s_page_shows_the_project_s_instructions_escaped_with_their_line_breaks(images, tmp_path):
    """The filter evaluators see the VLM filter's rubric (the judge template's), nothing the page says
    of its own; a project made before projects carried instructions is refused, not served without."""
    table = pd.DataFrame(
        {
            "image_id": ["i1", "i2"],
            "path": [str(images / "red.png"), str(images / "blue.png")],
            "description": ["red", "blue"],
        }
    )
    make_project("image_score", table, ["alice"], tmp_path / "project", "", instructions=RUBRIC)
    with running(tmp_path / "project") as (port, path):
        for item in ("i1", "i2"):
            status, body = get(port, f"{path}?item={item}")
            assert status == 200
            assert "\n" in RUBRIC
            assert f'<p id="instructions">{RUBRIC}</p>'.encode() in body  # nothing to escape; line breaks as written
            assert b"1 = not at all" not in body
    marked = 'Look <b>closely</b> & say "which".\n\nThen choose.'
    make_project("image_score", table, ["alice"], tmp_path / "marked", "", instructions=marked)
    with running(tmp_path / "marked") as (port, path):
        assert f'<p id="instructions">{escape(marked)}</p>'.encode() in get(port, path)[1]
    project = load_project(tmp_path / "project")
    del project["instructions"]
    write_json(tmp_path / "project" / "project.json", project)
    with pytest.raises(ValueError, match=r"project\.json has no instructions for annotators"):
        serve(tmp_path / "project", port=0)


def test_a_project_inside_a_workflow_output_is_neither_served_nor_pushed(images, tmp_path):
    """Snakemake replaces a directory output (marked by its .snakemake_timestamp) when the subsets change;
    labels written beside a project there would go with it."""
    from blindspot.annotation.label_studio import push

    output = tmp_path / "results" / "annotation_projects"
    pairwise_project(images, output / "pairwise")
    (output / ".snakemake_timestamp").touch()
    for call in (lambda: serve(output / "pairwise", port=0), lambda: push(output / "pairwise", "http://x", "t")):
        with pytest.raises(ValueError, match=r"inside the workflow.s output .*annotation_projects.*copy the project"):
            call()
    assert not (output / "pairwise" / DATABASE).exists()
    copied = tmp_path / "annotation" / "pairwise"
    pairwise_project(images, copied)
    with running(copied) as (port, path):
        assert get(port, path)[0] == 200


def test_a_port_that_is_taken_is_one_line_naming_it(images, tmp_path, capsys):
    from blindspot.cli import main

    pairwise_project(images, tmp_path / "project")
    with running(tmp_path / "project") as (port, _), pytest.raises(SystemExit):
        main(["annotate", "serve", str(tmp_path / "project"), "--port", str(port)])
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"blindspot: error: cannot serve on 127.0.0.1:{port}: ")


def test_each_annotator_answers_only_their_own_questions_with_the_letters_shown(images, tmp_path):
    """HumbleBench's human study on the page: each person is shown, counted and allowed only their own
    items; an answer must be a letter the item shows (NOTA-only's gap is no answer); the answers export
    as Label Studio's format and read back as Table 7's human answers."""
    from blindspot.humblebench.human_study import answers_from_labels

    study = pd.DataFrame(
        {
            "annotator": ["alice", "alice", "bob"],
            "item_id": ["original:q1", "nota_only:q2", "original:q3"],
            "setting": ["original", "nota_only", "original"],
            "question_id": ["q1", "q2", "q3"],
            "type": ["Object"] * 3,
            "image_path": [str(images / "red.png"), str(images / "blue.png"), str(images / "red.png")],
            "question": ["What colour?", "What shape?", "What size?"],
            "options": [
                json.dumps(["red", "None of the above"]),
                json.dumps(["round", "None of the above"]),
                json.dumps(["big", "small", "None of the above"]),
            ],
            "letters": ["AB", "AC", "ABC"],
        }
    )
    folder = tmp_path / "project"
    project = make_project("humble_answer", study, ["alice", "bob"], folder, "")
    server = serve(folder, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        alice, bob = (f"/a/{project['annotators'][name]}" for name in ("alice", "bob"))

        def get(path: str) -> tuple[int, str]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read().decode()

        def answer(path: str, item: str, letter: str) -> int:
            body = urlencode({"item_id": item, "answer": letter}).encode()
            return post(port, path, body, form(body))[0]

        assert json.loads(get(f"{alice}/progress")[1]) == {"done": 0, "total": 2}
        assert json.loads(get(f"{bob}/progress")[1]) == {"done": 0, "total": 1}
        assert "What size?" in get(bob)[1]
        assert get(f"{bob}?item=original:q1")[0] == 404  # alice's question, and its image
        assert get(f"{bob}/image/original:q1/image")[0] == 404
        assert answer(bob, "original:q1", "A") == 400
        assert answer(alice, "nota_only:q2", "B") == 400  # removed in NOTA-only: not shown
        assert answer(alice, "original:q1", "A") == 303
        assert answer(alice, "nota_only:q2", "C") == 303
        assert answer(bob, "original:q3", "B") == 303
        assert "All items are labelled" in get(alice)[1]
    finally:
        server.shutdown()
        server.server_close()
    exported = tmp_path / "answers.json"
    export_labels(folder, exported, {"alice": "alice@example.org", "bob": "bob@example.org"})
    found = answers_from_labels(read_labels("humble_answer", exported), study, str(exported))
    assert sorted(found.itertuples(index=False, name=None)) == [
        ("alice", "q1", "original", "A"),
        ("alice", "q2", "nota_only", "C"),
        ("bob", "q3", "original", "B"),
    ]
