"""Label Studio both ways, through its REST API: `push` makes a Label Studio project from a project
folder (its label config, a local-files storage for its images, its tasks), `pull` exports its
annotations, names each annotator and checks every value against the label config.

Annotators are Label Studio users, matched by email: `emails` maps a blindspot annotator name to the
email of its Label Studio user (a name that is an email needs no entry). A pull writes each
annotation's `completed_by` as the user's id and email and the blindspot name (`annotator`), so its
labels and the built-in page's name the same people the same way.

The API is called with a legacy token (`Authorization: Token ...`, Label Studio's Account & Settings;
an organization must have legacy tokens enabled: Organization > Settings > Access Token Settings, or
LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true when the server is first started).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import requests

from blindspot.annotation.labels import label_studio_export, labels_from_export
from blindspot.annotation.projects import (
    LABEL_CONFIGS,
    label_studio_tasks,
    load_project,
    outside_workflow_outputs,
    project_instructions,
)
from blindspot.io import read_json, write_json

LINK = "label_studio.json"  # in the project folder: the Label Studio server and project a push made
TIMEOUT_S = 120  # an import of a few thousand tasks takes a while on a small server


class LabelStudioError(ValueError):
    """Label Studio refused a call or could not be reached; the message names the call."""


class Client:
    """Label Studio's REST API at `url` with a legacy token."""

    def __init__(self, url: str, token: str):
        if not token:
            raise LabelStudioError("no Label Studio API token: set LABEL_STUDIO_API_KEY")
        self.url = url.rstrip("/")
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.session.request(method, self.url + path, timeout=TIMEOUT_S, **kwargs)
        except requests.RequestException as error:
            raise LabelStudioError(f"Label Studio at {self.url}: {method} {path}: {error}") from None
        if not response.ok:
            why = " ".join(response.text.split())[:500]
            status = response.status_code
            raise LabelStudioError(f"Label Studio at {self.url}: {method} {path} answered {status}: {why}")
        return response.json() if response.content else None


def parse_emails(pairs: Sequence[str]) -> dict[str, str]:
    """`NAME=EMAIL` pairs (the `--email` options) as a mapping."""
    emails = {}
    for pair in pairs:
        name, sep, email = pair.partition("=")
        if not sep or not name or "@" not in email:
            raise ValueError(f"--email {pair!r} is not NAME=EMAIL")
        emails[name] = email
    return emails


def annotator_emails(names: Iterable[str], emails: Mapping[str, str]) -> dict[str, str]:
    """Each annotator's Label Studio email: from `emails`, else the name when it is an email."""
    found = {}
    for name in names:
        email = emails.get(name, name)
        if "@" not in email:
            raise ValueError(f"annotator {name!r} has no Label Studio email: pass --email {name}=EMAIL")
        found[name] = email
    return found


def export_labels(folder: str | Path, out: str | Path, emails: Mapping[str, str]) -> int:
    """The built-in page's labels as Label Studio tasks with annotations, importable into the pushed
    project (each annotator a Label Studio user, by email); returns how many labels."""
    from blindspot.annotation.server import DATABASE, LabelStore

    project = load_project(folder)
    labels = LabelStore(Path(folder) / DATABASE).frame()
    names = annotator_emails(labels["annotator"].unique() if len(labels) else [], emails)
    write_json(out, label_studio_export(project, labels, names))
    return len(labels)


def instruction_html(text: str) -> str:
    """Instructions as Label Studio's `expert_instruction` (HTML, which it shows unescaped): the text
    escaped, a paragraph for each run of lines between blank lines, its line breaks kept."""
    paragraphs = [part for part in re.split(r"\n[ \t]*\n", text.strip()) if part.strip()]
    return "\n".join(
        "<p>" + "<br>\n".join(html.escape(line) for line in part.strip().splitlines()) + "</p>" for part in paragraphs
    )


def push(folder: str | Path, url: str, token: str, title: str | None = None) -> int:
    """A Label Studio project for a project folder: its label config, with empty annotations refused
    (Label Studio allows them by default, and a pull refuses them), its instructions as Label Studio's
    own (`expert_instruction`, shown before labelling), a local-files storage at its `storage_path`
    (Label Studio must run with LOCAL_FILES_SERVING_ENABLED=true and LOCAL_FILES_DOCUMENT_ROOT set to its
    `image_root`), and its tasks. Records the server and the project's id in `label_studio.json` for
    `pull`; returns the id."""
    folder = outside_workflow_outputs(folder)
    project = load_project(folder)
    instructions = project_instructions(project, folder)
    client = Client(url, token)
    created = client.call(
        "POST",
        "/api/projects/",
        json={
            "title": title or f"blindspot {project['task']} ({folder.resolve().name})",
            "label_config": LABEL_CONFIGS[project["task"]],
            "expert_instruction": instruction_html(instructions),
            "show_instruction": True,  # shown to each annotator when they start labelling
            "enable_empty_annotation": False,  # Label Studio's default lets an annotator submit nothing
        },
    )
    project_id = created["id"]
    client.call(
        "POST",
        "/api/storages/localfiles/",
        json={
            "project": project_id,
            "title": "blindspot images",
            "path": project["storage_path"],
            "use_blob_urls": False,
        },
    )
    tasks = [{"data": entry["data"]} for entry in label_studio_tasks(project)]
    if tasks:
        client.call("POST", f"/api/projects/{project_id}/import", json=tasks)
    write_json(folder / LINK, {"url": client.url, "project_id": project_id})
    return project_id


def pull(folder: str | Path, out: str | Path, token: str, emails: Mapping[str, str], url: str | None = None) -> int:
    """The pushed project's annotations in Label Studio's JSON export format, each annotator named
    (`completed_by`: the user's id, email and blindspot name), every value checked against the
    task's label config before `out` is written; returns how many labels."""
    folder = Path(folder)
    project = load_project(folder)
    link_path = folder / LINK
    if not link_path.exists():
        raise ValueError(f"{link_path} not found: push the project first (blindspot annotate push {folder})")
    link = read_json(link_path)
    if not {"url", "project_id"} <= link.keys():
        raise ValueError(f"{link_path}: no url or project_id: push again (blindspot annotate push {folder})")
    client = Client(url or link["url"], token)
    tasks = client.call(
        "GET", f"/api/projects/{link['project_id']}/export", params={"exportType": "JSON", "download_all_tasks": "true"}
    )
    users = client.call("GET", "/api/users/")
    email_of = {user["id"]: user["email"] for user in (users["results"] if isinstance(users, Mapping) else users)}
    name_of = {email: name for name, email in emails.items()}
    for entry in tasks:
        for annotation in entry.get("annotations", []):
            who = annotation.get("completed_by")
            user = who.get("id") if isinstance(who, Mapping) else who
            if user not in email_of:
                raise LabelStudioError(f"Label Studio at {client.url}: task {entry.get('id')}: unknown user {user!r}")
            email = email_of[user]
            annotation["completed_by"] = {"id": user, "email": email, "annotator": name_of.get(email, email)}
    labels = labels_from_export(project["task"], tasks, f"Label Studio project {link['project_id']}")
    write_json(out, tasks)
    return len(labels)
