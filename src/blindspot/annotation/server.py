"""The built-in annotation page, for teams without Label Studio: one link per annotator, the three tasks
of `blindspot.annotation.projects`, keyboard shortcuts, progress, SQLite storage.

`blindspot annotate serve PROJECT` binds 127.0.0.1 by default and prints each annotator's link. A
label is committed to SQLite (write-ahead log, synchronous) before the page answers, so a label the
annotator saw accepted survives a crash or a kill. Every text shown is HTML-escaped (Jinja2
autoescape): prompts and questions were written by LLMs. A token sees only its own labels; an
unknown token, item id or image is refused. `blindspot annotate export PROJECT OUT.json` writes the
labels in Label Studio's export format, which `annotation.read_labels` reads.
"""

from __future__ import annotations

import json
import mimetypes
import sqlite3
import threading
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pandas as pd
from jinja2 import Environment

from blindspot.annotation.projects import PAIR_CHOICES, label_studio_export, load_project
from blindspot.humblebench.questions import DECISIONS
from blindspot.io import write_json

DATABASE = "labels.sqlite"

_PAGE = Environment(autoescape=True).from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>blindspot annotation: {{ annotator }}</title>
<style>
body { font-family: sans-serif; margin: 1.5em; max-width: 70em; }
img { max-width: 30em; max-height: 30em; border: 1px solid #888; }
.pair { display: flex; gap: 2em; } .text { font-size: 1.2em; margin: 0.8em 0; white-space: pre-wrap; }
button { font-size: 1.1em; margin: 0.2em; } kbd { border: 1px solid #888; padding: 0 0.3em; }
</style></head><body>
<p id="progress">{{ annotator }}: {{ done }} of {{ total }} labelled</p>
{% if item is none %}
<h1 id="finished">All items are labelled. Thank you.</h1>
{% else %}
<form id="label" method="post" action="/a/{{ token }}/label">
<input type="hidden" name="item_id" value="{{ item.id }}">
{% if task == "image_score" %}
<p>Score how well the image matches its description: 1 = not at all, 10 = every stated detail.</p>
<img id="image" src="/a/{{ token }}/image/{{ item.id }}/image" alt="the image">
<p class="text" id="description">{{ item.description }}</p>
{% for score in range(1, 11) %}<button type="submit" name="score" value="{{ score }}">{{ score }}</button>{% endfor %}
<p>Keys: <kbd>1</kbd>-<kbd>9</kbd>, <kbd>0</kbd> for 10.</p>
{% elif task == "pairwise" %}
<p>Which image matches the prompt? Judge only the details it states, not which image is more typical.</p>
<p class="text" id="prompt">{{ item.prompt }}</p>
<div class="pair"><img id="left" src="/a/{{ token }}/image/{{ item.id }}/left_image" alt="left image">
<img id="right" src="/a/{{ token }}/image/{{ item.id }}/right_image" alt="right image"></div>
<button type="submit" name="choice" value="left">Left</button>
<button type="submit" name="choice" value="right">Right</button>
<button type="submit" name="choice" value="neither">Neither / no clear preference</button>
<p>Keys: <kbd>&larr;</kbd> or <kbd>l</kbd> left, <kbd>&rarr;</kbd> or <kbd>r</kbd> right, <kbd>n</kbd> neither.</p>
{% else %}
<p>Is the question answerable from the image, with exactly the labelled option correct?</p>
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
    "pairwise": {"ArrowLeft": ["choice", "left"], "l": ["choice", "left"], "ArrowRight": ["choice", "right"],
                 "r": ["choice", "right"], "n": ["choice", "neither"]},
    "question_check": {"k": ["decision", "keep"], "m": ["decision", "modify"], "d": ["decision", "delete"]},
}  # fmt: skip


class LabelStore:
    """Labels in SQLite, one row per annotator and item (a new label replaces the old)."""

    def __init__(self, path: str | Path):
        self.connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.lock = threading.Lock()
        with self.lock:
            self.connection.execute("PRAGMA journal_mode=WAL")
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


def parse_value(task: str, form: dict[str, str]) -> dict[str, Any]:
    """The label a form submits, checked; ValueError names what is wrong."""
    if task == "image_score":
        score = int(form.get("score", "0")) if form.get("score", "").isdigit() else 0
        if not 1 <= score <= 10:
            raise ValueError("score must be a whole number from 1 to 10")
        return {"score": score}
    if task == "pairwise":
        if form.get("choice") not in PAIR_CHOICES:
            raise ValueError(f"choice must be one of {', '.join(PAIR_CHOICES)}")
        return {"choice": form["choice"]}
    if form.get("decision") not in DECISIONS:
        raise ValueError(f"decision must be one of {', '.join(DECISIONS)}")
    edit = form.get("edit", "").strip()
    if form["decision"] == "modify":
        try:
            edited = json.loads(edit)
            assert {"question", "options", "label"} <= set(edited)
        except (json.JSONDecodeError, AssertionError, TypeError):
            raise ValueError('modify needs the edit as JSON with "question", "options" and "label"') from None
    return {"decision": form["decision"], "edit": edit}


def make_handler(project: dict[str, Any], store: LabelStore) -> type[BaseHTTPRequestHandler]:
    items = {item["id"]: item for item in project["items"]}
    annotators = {token: name for name, token in project["annotators"].items()}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # tokens are in the paths: keep them out of logs

        def _send(self, status: int, body: bytes, content_type: str = "text/html; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _fail(self, status: HTTPStatus, why: str) -> None:
            self._send(status, f"<p>{status.value} {status.phrase}: {why}</p>".encode())

        def _route(self) -> tuple[str | None, list[str]]:
            parts = urlsplit(self.path).path.strip("/").split("/")
            if len(parts) < 2 or parts[0] != "a" or parts[1] not in annotators:
                return None, parts
            return annotators[parts[1]], parts[2:]

        def do_GET(self) -> None:
            annotator, rest = self._route()
            if annotator is None:
                return self._fail(HTTPStatus.FORBIDDEN, "unknown annotator link")
            if rest and rest[0] == "image" and len(rest) == 3:
                item = items.get(rest[1])
                if item is None or rest[2] not in item["images"]:
                    return self._fail(HTTPStatus.NOT_FOUND, "no such image")
                path = Path(item["images"][rest[2]])
                return self._send(HTTPStatus.OK, path.read_bytes(), mimetypes.guess_type(path.name)[0] or "image/png")
            if rest and rest[0] == "progress":
                done = len(store.labelled(annotator))
                return self._send(
                    HTTPStatus.OK, json.dumps({"done": done, "total": len(items)}).encode(), "application/json"
                )
            if rest:
                return self._fail(HTTPStatus.NOT_FOUND, "no such page")
            query = parse_qs(urlsplit(self.path).query)
            done = store.labelled(annotator)
            if "item" in query:
                item = items.get(query["item"][0])
                if item is None:
                    return self._fail(HTTPStatus.NOT_FOUND, "unknown item")
            else:
                item = next((i for i in project["items"] if i["id"] not in done), None)
            page = _PAGE.render(
                annotator=annotator, token=self._route_token(), task=project["task"], item=item, done=len(done),
                total=len(items), keys=_KEYS[project["task"]],
            )  # fmt: skip
            self._send(HTTPStatus.OK, page.encode())
            return None

        def _route_token(self) -> str:
            return urlsplit(self.path).path.strip("/").split("/")[1]

        def do_POST(self) -> None:
            annotator, rest = self._route()
            if annotator is None:
                return self._fail(HTTPStatus.FORBIDDEN, "unknown annotator link")
            if rest != ["label"]:
                return self._fail(HTTPStatus.NOT_FOUND, "no such page")
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode(), keep_blank_values=True).items()}
            if form.get("item_id") not in items:
                return self._fail(HTTPStatus.BAD_REQUEST, "unknown item")
            try:
                value = parse_value(project["task"], form)
            except ValueError as error:
                return self._fail(HTTPStatus.BAD_REQUEST, str(error))
            store.put(annotator, form["item_id"], value)
            self.send_response(HTTPStatus.SEE_OTHER)
            self.send_header("Location", f"/a/{self._route_token()}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None

    return Handler


def serve(folder: str | Path, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    """The server of a project folder (not yet serving: call `serve_forever`)."""
    project = load_project(folder)
    store = LabelStore(Path(folder) / DATABASE)
    return ThreadingHTTPServer((host, port), make_handler(project, store))


def links(folder: str | Path, host: str, port: int) -> dict[str, str]:
    project = load_project(folder)
    return {name: f"http://{host}:{port}/a/{token}" for name, token in project["annotators"].items()}


def export_labels(folder: str | Path, out: str | Path) -> int:
    """Every stored label in Label Studio's export format; returns how many."""
    project = load_project(folder)
    labels = LabelStore(Path(folder) / DATABASE).frame()
    write_json(out, label_studio_export(project, labels))
    return len(labels)
