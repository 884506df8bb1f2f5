"""A Hugging Face hub cache laid out on disk as huggingface_hub lays it out, and a hub on 127.0.0.1
that serves repositories from memory: enough of the hub's API (revision, tree, auth-check, resolve)
for huggingface_hub's own downloads to run against it."""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "a" * 40
OTHER_COMMIT = "b" * 40
# The token FakeHub's gated repositories open to.
OPEN_TOKEN = "hf_opens_gated"


def with_hub_models(config: dict, entries: dict[str, dict]) -> dict:
    """`config` with the registry entries `entries` (by name) replaced by hub models."""
    config = copy.deepcopy(config)
    for name, entry in entries.items():
        config["models"][name] = {"backend": "transformers", "gpus": 0, "dtype": "float32", "weights_gb": 0.1} | entry
    return config


def clear_token(monkeypatch, tmp_path: Path) -> None:
    """No hub token: neither HF_TOKEN nor a token file."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))


def lay_out(
    cache: Path,
    repo_id: str,
    files: dict[str, bytes],
    commit: str = COMMIT,
    ref: str | None = "main",
    repo_type: str = "model",
) -> Path:
    """models--ORG--NAME/{blobs,refs,snapshots} (datasets--... for a dataset): each file a blob named by
    its hash, linked from the commit's snapshot; `ref` (a branch) points at the commit. Returns the
    snapshot folder."""
    folder = cache / (f"{repo_type}s--" + repo_id.replace("/", "--"))
    snapshot = folder / "snapshots" / commit
    for path, content in files.items():
        blob = folder / "blobs" / hashlib.sha256(content).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(content)
        link = snapshot / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (path.count("/") + 2)) / "blobs" / blob.name)
    snapshot.mkdir(parents=True, exist_ok=True)
    if ref:
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return snapshot


def transformers_repo(shards: int = 2) -> dict[str, bytes]:
    """A transformers model repository as the hub has them: sharded safetensors with their index, the
    same weights as .bin, an ONNX copy and the original checkpoint, configs and a tokenizer."""
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    index = {"metadata": {}, "weight_map": {f"layer{i}.weight": name for i, name in enumerate(names)}}
    return {
        "config.json": b'{"model_type": "llama"}',
        "generation_config.json": b"{}",
        "tokenizer.json": b"{}",
        "tokenizer_config.json": b"{}",
        "README.md": b"# card",
        "model.safetensors.index.json": json.dumps(index).encode(),
        **{name: f"weights {name}".encode() for name in names},
        "pytorch_model.bin": b"old weights",
        "onnx/model.onnx": b"onnx",
        "original/consolidated.00.pth": b"original",
        "original/params.json": b"{}",
    }


class FakeHub:
    """The hub at `endpoint` while the `with` block runs, with model repositories `repos` and dataset
    repositories `datasets`. `gated` repositories answer a download or an auth-check without OPEN_TOKEN
    with the hub's GatedRepo error. `downloads` counts GETs of each file."""

    def __init__(
        self,
        repos: dict[str, dict[str, bytes]],
        gated: tuple[str, ...] = (),
        commit: str = COMMIT,
        datasets: dict[str, dict[str, bytes]] | None = None,
    ):
        self.repos, self.gated, self.commit, self.datasets = repos, gated, commit, datasets or {}
        self.downloads: Counter[str] = Counter()

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def refuse(self, code: str, status: int = 404) -> None:
                self.send(status, json.dumps({"error": code}).encode(), {"X-Error-Code": code, "X-Error-Message": code})

            def answer(self) -> None:
                parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
                if parts == ["api", "models"]:
                    return self.send(200, b"[]")
                # A dataset's routes are a model's with "datasets" in place of "models" (or before the id).
                repos = hub.datasets if "datasets" in (parts[1:2] if parts[:1] == ["api"] else parts[:1]) else hub.repos
                if repos is hub.datasets:
                    parts = ["api", "models", *parts[2:]] if parts[0] == "api" else parts[1:]
                api = parts[:2] == ["api", "models"]
                repo_id = "/".join(parts[2:4] if api else parts[:2])
                if repo_id not in repos:
                    return self.refuse("RepoNotFound")
                files = repos[repo_id]
                locked = repo_id in hub.gated and self.headers.get("Authorization") != f"Bearer {OPEN_TOKEN}"
                if api and parts[4:5] == ["revision"]:
                    siblings = [{"rfilename": path} for path in files]
                    return self.send(200, json.dumps({"id": repo_id, "sha": hub.commit, "siblings": siblings}).encode())
                if api and parts[4:5] == ["tree"]:
                    tree = [
                        {"type": "file", "path": p, "size": len(c), "oid": hashlib.sha1(c).hexdigest()}
                        for p, c in files.items()
                    ]
                    return self.send(200, json.dumps(tree).encode())
                if api and parts[4:5] == ["auth-check"]:
                    return self.refuse("GatedRepo", 403) if locked else self.send(200, b"{}")
                if not api and parts[2:3] == ["resolve"]:
                    path = "/".join(parts[4:])
                    if path not in files:
                        return self.refuse("EntryNotFound")
                    if locked:
                        return self.refuse("GatedRepo", 403)
                    if self.command == "GET":
                        hub.downloads[f"{repo_id}/{path}"] += 1
                    etag = hashlib.sha256(files[path]).hexdigest()
                    return self.send(200, files[path], {"ETag": f'"{etag}"', "X-Repo-Commit": hub.commit})
                return self.refuse("NotFound")

            do_GET = do_HEAD = answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
