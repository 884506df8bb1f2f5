"""The built-in annotation page, for teams without Label Studio: one link per annotator, the tasks of
`blindspot.annotation.projects`, keyboard shortcuts, progress, SQLite storage. Every item's page
shows the project's instructions (`project.json`'s `instructions`: for `image_score` the VLM filter's
rubric), with their line breaks.

`blindspot annotate serve PROJECT` binds 127.0.0.1 by default and prints each annotator's link. A
label is committed to SQLite (write-ahead log, synchronous) before the page answers, so a label the
annotator saw accepted survives a crash or a kill. Every text shown is HTML-escaped (Jinja2
autoescape): prompts and questions were written by LLMs. A token sees only its own labels, and where
items are one person's (`humble_answer`) only its own items; an unknown token, item id or image is
refused. `blindspot annotate export PROJECT OUT.json` writes the
labels in Label Studio's export format, which `annotation.read_labels` reads.

Anything a client sends gets an answer, never a dropped connection: a form that is not
URL-encoded (415), without a length (411), with a bad length or an undecodable body (400), too
large (413), or stalled mid-body (408, after `CONNECTION_TIMEOUT_S`; a client that stalls before
its request is complete is disconnected then). A room of annotators may submit at once: the listen
backlog holds `LISTEN_BACKLOG` connections. Images are read only from under the project's image
root, after resolving links; relative image paths are relative to the project folder, so the page
works from any working directory.
"""

from __future__ import annotations

import contextlib
import json
import mimetypes
import re
import socket
import sqlite3
import threading
import time
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

import pandas as pd
from jinja2 import Environment

from blindspot.annotation.forms import parse_value
from blindspot.annotation.projects import load_project, outside_workflow_outputs, own_items, project_instructions
from blindspot.humblebench.settings import LETTERS

DATABASE = "labels.sqlite"
FORM_TYPE = "application/x-www-form-urlencoded"
MAX_BODY_BYTES = 64 * 1024  # a label, even a question-check edit, is a few hundred bytes
MAX_FIELDS = 8  # item_id, the value and an edit: room to spare, not a million
CONNECTION_TIMEOUT_S = 30.0  # per read or write: a stalled client gives its thread back after this
LINGER_S = 2.0  # after refusing a form unread: how long its rest is read and dropped
LISTEN_BACKLOG = 1024  # a room of annotators submitting at once (the kernel caps it at net.core.somaxconn)

_PAGE = Environment(autoescape=True).from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>blindspot annotation: {{ annotator }}</title>
<style>
body { font-family: sans-serif; margin: 1.5em; max-width: 70em; }
img { max-width: 30em; max-height: 30em; border: 1px solid #888; }
.pair { display: flex; gap: 2em; } figure { margin: 0; } figcaption { font-weight: bold; margin-bottom: 0.3em; }
.text { font-size: 1.2em; margin: 0.8em 0; white-space: pre-wrap; }
#instructions { white-space: pre-wrap; background: #f4f4f4; padding: 0.5em 0.8em; max-width: 60em; }
button { font-size: 1.1em; margin: 0.2em; } kbd { border: 1px solid #888; padding: 0 0.3em; }
</style></head><body>
<p id="progress">{{ annotator }}: {{ done }} of {{ total }} labelled</p>
{% if item is none %}
<h1 id="finished">All items are labelled. Thank you.</h1>
{% else %}
<form id="label" method="post" action="/a/{{ token }}/label">
<input type="hidden" name="item_id" value="{{ item.id }}">
<p id="instructions">{{ instructions }}</p>
{% if task == "image_score" %}
<img id="image" src="/a/{{ token }}/image/{{ item.id }}/image" alt="the image">
<p class="text" id="description">{{ item.description }}</p>
{% for score in range(1, 11) %}<button type="submit" name="score" value="{{ score }}">{{ score }}</button>{% endfor %}
<p>Keys: <kbd>1</kbd>-<kbd>9</kbd>, <kbd>0</kbd> for 10.</p>
{% elif task == "pairwise" %}
<p class="text" id="prompt">{{ item.prompt }}</p>
<div class="pair">
<figure><figcaption id="left-caption">Left</figcaption>
<img id="left" src="/a/{{ token }}/image/{{ item.id }}/left_image" alt="left image"></figure>
<figure><figcaption id="right-caption">Right</figcaption>
<img id="right" src="/a/{{ token }}/image/{{ item.id }}/right_image" alt="right image"></figure></div>
<button type="submit" name="choice" value="left">Left</button>
<button type="submit" name="choice" value="right">Right</button>
<button type="submit" name="choice" value="neither">Neither / no clear preference</button>
<p>Keys: <kbd>&larr;</kbd> or <kbd>l</kbd> left, <kbd>&rarr;</kbd> or <kbd>r</kbd> right, <kbd>n</kbd> neither.</p>
{% elif task == "humble_answer" %}
<img id="image" src="/a/{{ token }}/image/{{ item.id }}/image" alt="the image">
<p class="text" id="question">{{ item.question }}</p>
<p class="text" id="options">{{ item.options }}</p>
{% for letter in item.letters %}<button type="submit" name="answer" value="{{ letter }}">{{ letter }}</button>
{% endfor %}
<p>Keys: the option's letter.</p>
{% else %}
<img id="image" src="/a/{{ token }}/image/{{ item.id }}/image" alt="the image">
<p class="text" id="question">{{ item.question }}</p>
<p class="text" id="options">{{ item.options }}</p>
<p class="text">Labelled correct: <span id="answer">{{ item.label }}</span></p>
<textarea name="edit" id="edit" rows="3" cols="80"
 placeholder='For modify: {"question": "...", "options": ["...", "None of the above"], "label": "A"}'></textarea><br>
<button type="submit" name="decision" value="keep">Keep</button>
<button type="submit" name="decision" value="modify">Modify</button>
<button type="submit" name="decision" value="delete">Delete</button>
<p>Keys (outside the text box): <kbd>k</kbd> keep, <kbd>m</kbd> modify, <kbd>d</kbd> delete.</p>
{% endif %}
</form>
<script>
const keys = {{ keys | tojson }};
document.addEventListener("keydown", (event) => {
  if (event.target.tagName === "TEXTAREA") return;
  const choice = keys[event.key];
  if (!choice) return;
  const button = document.querySelector(`button[name="${choice[0]}"][value="${choice[1]}"]`);
  if (button) { event.preventDefault(); button.click(); }
});
</script>
{% endif %}
</body></html>
""")

_KEYS = {
    "image_score": {str(n % 10): ["score", str(n)] for n in range(1, 11)},
    "pairwise": {
        "ArrowLeft": ["choice", "left"],
        "l": ["choice", "left"],
        "ArrowRight": ["choice", "right"],
        "r": ["choice", "right"],
        "n": ["choice", "neither"],
    },
    "question_check": {"k": ["decision", "keep"], "m": ["decision", "modify"], "d": ["decision", "delete"]},
    "humble_answer": {key: ["answer", letter] for letter in LETTERS for key in (letter, letter.lower())},
}


class LabelStore:
    """Labels in SQLite, one row per annotator and item (a new label replaces the old)."""

    def __init__(self, path: str | Path):
        self.connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.lock = threading.Lock()
        with self.lock:
            try:
                self.connection.execute("PRAGMA journal_mode=WAL")
            except sqlite3.DatabaseError as error:  # the first statement that reads the file
                self.connection.close()
                raise ValueError(f"{path}: not the project's label database ({error})") from None
            self.connection.execute("PRAGMA synchronous=FULL")
            self.connection.execute(
                "CREATE TABLE IF NOT EXISTS labels (annotator TEXT NOT NULL, item_id TEXT NOT NULL, "
                "value TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (annotator, item_id))"
            )

    def put(self, annotator: str, item_id: str, value: dict[str, Any]) -> None:
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with self.lock:
            self.connection.execute(
                "INSERT OR REPLACE INTO labels VALUES (?, ?, ?, ?)", (annotator, item_id, json.dumps(value), now)
            )

    def labelled(self, annotator: str) -> set[str]:
        with self.lock:
            rows = self.connection.execute("SELECT item_id FROM labels WHERE annotator = ?", (annotator,)).fetchall()
        return {row[0] for row in rows}

    def frame(self) -> pd.DataFrame:
        with self.lock:
            rows = self.connection.execute("SELECT annotator, item_id, value, created_at FROM labels").fetchall()
        return pd.DataFrame(
            [{"annotator": a, "item_id": i, **json.loads(v), "created_at": c} for a, i, v, c in rows],
        )


class RequestError(Exception):
    """A request this page refuses: the status to answer and why."""

    def __init__(self, status: HTTPStatus, why: str):
        super().__init__(why)
        self.status = status


def image_file(folder: Path, root: Path, stored: str) -> Path:
    """The file of an image path stored in a project: a relative one is relative to the project folder
    (not the working directory); links are resolved, and the file must lie under the image `root`."""
    path = (folder / stored).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise RequestError(HTTPStatus.NOT_FOUND, "no such image")
    return path


def make_handler(
    folder: Path, project: dict[str, Any], store: LabelStore, connection_timeout: float = CONNECTION_TIMEOUT_S
) -> type[BaseHTTPRequestHandler]:
    mine = {name: own_items(project, name) for name in project["annotators"]}  # each person's, in order
    own = {name: {item["id"]: item for item in listed} for name, listed in mine.items()}
    instructions = project_instructions(project, folder)
    annotators = {token: name for name, token in project["annotators"].items()}
    image_root = (folder / project["image_root"]).resolve()

    class Handler(BaseHTTPRequestHandler):
        timeout = connection_timeout  # the socket's timeout, set by `StreamRequestHandler.setup`

        def log_message(self, format: str, *args: Any) -> None:
            pass  # tokens are in the paths: keep them out of logs

        def _send(self, status: int, body: bytes, content_type: str = "text/html; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        body_read = False

        def _fail(self, status: HTTPStatus, why: str) -> None:
            self.close_connection = True
            self._send(status, f"<p>{status.value} {status.phrase}: {why}</p>".encode())
            if self.command == "POST" and not self.body_read:
                self._drain()

        def _drain(self) -> None:
            """Read and drop the unread form for up to LINGER_S after answering: closing a socket with
            unread data resets the connection, and the client would lose the answer."""
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_S)
            deadline = time.monotonic() + LINGER_S
            with contextlib.suppress(OSError):
                while time.monotonic() < deadline and self.connection.recv(1 << 16):
                    pass

        def _route(self) -> tuple[str | None, list[str]]:
            parts = urlsplit(self.path).path.strip("/").split("/")
            if len(parts) < 2 or parts[0] != "a" or parts[1] not in annotators:
                return None, parts
            return annotators[parts[1]], parts[2:]

        def _image(self, annotator: str, item_id: str, field: str) -> None:
            item = own[annotator].get(item_id)
            if item is None or field not in item["images"]:
                raise RequestError(HTTPStatus.NOT_FOUND, "no such image")
            path = image_file(folder, image_root, item["images"][field])
            try:
                data = path.read_bytes()
            except OSError:
                raise RequestError(HTTPStatus.NOT_FOUND, "the image cannot be read") from None
            self._send(HTTPStatus.OK, data, mimetypes.guess_type(path.name)[0] or "image/png")

        def do_GET(self) -> None:
            annotator, rest = self._route()
            if annotator is None:
                return self._fail(HTTPStatus.FORBIDDEN, "unknown annotator link")
            if rest and rest[0] == "image" and len(rest) == 3:
                try:
                    return self._image(annotator, rest[1], rest[2])
                except RequestError as error:
                    return self._fail(error.status, str(error))
            if rest and rest[0] == "progress":
                done = len(store.labelled(annotator))
                return self._send(
                    HTTPStatus.OK,
                    json.dumps({"done": done, "total": len(own[annotator])}).encode(),
                    "application/json",
                )
            if rest:
                return self._fail(HTTPStatus.NOT_FOUND, "no such page")
            query = parse_qs(urlsplit(self.path).query)
            done = store.labelled(annotator)
            if "item" in query:
                item = own[annotator].get(query["item"][0])
                if item is None:
                    return self._fail(HTTPStatus.NOT_FOUND, "unknown item")
            else:
                item = next((i for i in mine[annotator] if i["id"] not in done), None)
            page = _PAGE.render(
                annotator=annotator,
                token=self._route_token(),
                task=project["task"],
                item=item,
                done=len(done),
                total=len(own[annotator]),
                keys=_KEYS[project["task"]],
                instructions=instructions,
            )
            self._send(HTTPStatus.OK, page.encode())
            return None

        def _route_token(self) -> str:
            return urlsplit(self.path).path.strip("/").split("/")[1]

        def _form(self) -> dict[str, str]:
            """The posted form: URL-encoded UTF-8 of a declared, bounded length, each field once."""
            content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if content_type != FORM_TYPE:
                raise RequestError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"the form must be sent as {FORM_TYPE}")
            if "Transfer-Encoding" in self.headers:
                raise RequestError(HTTPStatus.LENGTH_REQUIRED, "send the form with a Content-Length, not chunked")
            declared = self.headers.get_all("Content-Length", [])
            if not declared:
                raise RequestError(HTTPStatus.LENGTH_REQUIRED, "the form needs a Content-Length")
            if len(declared) > 1 or not re.fullmatch(r"[0-9]{1,9}", declared[0].strip()):
                raise RequestError(HTTPStatus.BAD_REQUEST, f"Content-Length {', '.join(declared)[:40]!r} is not a size")
            length = int(declared[0])
            if length > MAX_BODY_BYTES:
                raise RequestError(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the form has {length} bytes (at most {MAX_BODY_BYTES})"
                )
            try:
                body = self.rfile.read(length)
                self.body_read = True
            except TimeoutError:
                raise RequestError(HTTPStatus.REQUEST_TIMEOUT, f"no data for {connection_timeout:g} seconds") from None
            if len(body) != length:
                raise RequestError(HTTPStatus.BAD_REQUEST, f"the form ended after {len(body)} of {length} bytes")
            try:
                fields = parse_qsl(body.decode(), keep_blank_values=True, errors="strict", max_num_fields=MAX_FIELDS)
            except UnicodeDecodeError:
                raise RequestError(HTTPStatus.BAD_REQUEST, "the form is not UTF-8") from None
            except ValueError:  # parse_qsl's "Max number of fields exceeded"
                raise RequestError(HTTPStatus.BAD_REQUEST, f"the form has more than {MAX_FIELDS} fields") from None
            form = dict(fields)
            if len(form) != len(fields):
                raise RequestError(HTTPStatus.BAD_REQUEST, "a field of the form is given twice")
            return form

        def do_POST(self) -> None:
            annotator, rest = self._route()
            if annotator is None:
                return self._fail(HTTPStatus.FORBIDDEN, "unknown annotator link")
            if rest != ["label"]:
                return self._fail(HTTPStatus.NOT_FOUND, "no such page")
            try:
                form = self._form()
                if form.get("item_id") not in own[annotator]:
                    raise RequestError(HTTPStatus.BAD_REQUEST, "unknown item")
                value = parse_value(project["task"], form, own[annotator][form["item_id"]])
            except RequestError as error:
                return self._fail(error.status, str(error))
            except ValueError as error:
                return self._fail(HTTPStatus.BAD_REQUEST, str(error))
            store.put(annotator, form["item_id"], value)
            self.send_response(HTTPStatus.SEE_OTHER)
            self.send_header("Location", f"/a/{self._route_token()}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None

    return Handler


class AnnotationServer(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG  # socketserver's default of 5 resets most of a room's simultaneous posts


def serve(
    folder: str | Path, host: str = "127.0.0.1", port: int = 8765, connection_timeout: float = CONNECTION_TIMEOUT_S
) -> ThreadingHTTPServer:
    """The server of a project folder (not yet serving: call `serve_forever`); `connection_timeout`: seconds a
    connection may wait for its client."""
    folder = outside_workflow_outputs(folder)
    project = load_project(folder)
    store = LabelStore(folder / DATABASE)
    try:
        return AnnotationServer((host, port), make_handler(folder, project, store, connection_timeout))
    except OSError as error:  # the port is taken, or the host is not this machine's
        raise ValueError(f"cannot serve on {host}:{port}: {error.strerror or error}") from None


def links(folder: str | Path, host: str, port: int) -> dict[str, str]:
    project = load_project(folder)
    return {name: f"http://{host}:{port}/a/{token}" for name, token in project["annotators"].items()}
