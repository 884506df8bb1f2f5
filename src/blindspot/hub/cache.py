"""The hub cache on disk (HF_HOME's, or a folder given): which files of a hub repository its loaders
read, whether the cache holds them at the pinned revision, and where a cached snapshot is. The
repositories themselves come from `blindspot.hub.repos`; `blindspot.hub.fetch` fills the cache.

`blindspot fetch-models` and `blindspot doctor` both decide what a model needs with `select_files`, so
what is fetched is what is checked. Only the files the loaders read are fetched and checked: configs, tokenizers and
the weights in the format the libraries pick (safetensors over .bin, the shards an index names,
never a release's single-file original, ONNX/GGUF copies or fp16 variants), of a metric released
as one checkpoint file (ImageReward, HPSv2, AlignScore) that file, and of a dataset every file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blindspot.hub.repos import HubModel

COMMIT = re.compile(r"[0-9a-f]{40}")
# Files that configure a model folder: configs, tokenizer vocabularies (JSON, text, sentencepiece and
# tiktoken models) and chat templates. Python files only for a model that runs remote code.
CONFIG_SUFFIXES = (".json", ".txt", ".model", ".tiktoken", ".jinja")
# The weight files transformers, diffusers and sentence-transformers look for in a folder, whole or in
# shards, and the shard indexes. Other weight files in the same folder (an fp16 variant, Mistral's
# consolidated.safetensors) are not loaded.
WEIGHT_STEMS = ("model", "pytorch_model", "diffusion_pytorch_model")
WEIGHTS = re.compile(rf"({'|'.join(WEIGHT_STEMS)})(-\d{{5}}-of-\d{{5}})?\.(safetensors|bin)")
INDEX = "{stem}.{format}.index.json"
# How a backend finds a model's folders, by the file at the top of the repository that it needs first.
LAYOUT_MARKERS = {
    "transformers": ("config.json",),
    "sentence_transformers": ("modules.json", "config.json"),
    "diffusers": ("model_index.json",),
}
# The marker of a repository read for its configs and tokenizer only.
CONFIG_MARKERS = ("tokenizer_config.json", "preprocessor_config.json", "config.json")
# A dataset's parquet shards as the hub names them: each says how many there are.
DATASET_SHARD = re.compile(r"(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.parquet")


@dataclass(frozen=True)
class Selection:
    files: tuple[str, ...]  # what the loaders read
    lacking: tuple[str, ...] = ()  # what they would read that the listing does not have


@dataclass(frozen=True)
class CacheState:
    commit: str | None  # the cached snapshot the revision resolves to, if any
    lacking: tuple[str, ...] = ()  # what that snapshot lacks
    other_commits: tuple[str, ...] = ()  # snapshots of other revisions

    @property
    def complete(self) -> bool:
        return self.commit is not None and not self.lacking


def _folder_files(listing: Collection[str], folder: str) -> list[str]:
    prefix = f"{folder}/" if folder else ""
    return sorted(p for p in listing if p.startswith(prefix) and "/" not in p[len(prefix) :])


def _weights(listing: Collection[str], folder: str, read_json: Callable[[str], Any]) -> Selection:
    """The weight files a library loads from `folder`: the shards of an index (safetensors first),
    else the folder's standard single files, safetensors over .bin."""
    prefix = f"{folder}/" if folder else ""
    present = set(_folder_files(listing, folder))
    for weight_format in ("safetensors", "bin"):
        for stem in WEIGHT_STEMS:
            index = prefix + INDEX.format(stem=stem, format=weight_format)
            if index in present:
                shards = sorted({prefix + shard for shard in read_json(index)["weight_map"].values()})
                return Selection((index, *shards), tuple(s for s in shards if s not in present))
        single = sorted(p for p in present if WEIGHTS.fullmatch(p[len(prefix) :]) and p.endswith(weight_format))
        if single:
            return Selection(tuple(single))
    return Selection(
        (), (f"weights in {folder or 'the top folder'} (model.safetensors, pytorch_model.bin or an index)",)
    )


def _model_folders(model: HubModel, listing: Collection[str], read_json: Callable[[str], Any]) -> dict[str, bool]:
    """The folders a backend reads, each with whether it holds weights."""
    if model.layout == "diffusers":
        components = read_json("model_index.json")
        folders = {
            name: f"{name}/config.json" in listing
            for name, value in components.items()
            if isinstance(value, list) and value[0] is not None
        }
        return {"": False} | folders
    if model.layout == "sentence_transformers" and "modules.json" in listing:
        # A module without settings (Normalize) has no folder in the repository.
        modules = {
            m["path"].strip("/"): m["type"].rsplit(".", 1)[-1] == "Transformer" for m in read_json("modules.json")
        }
        return {"": False} | {
            path: weights for path, weights in modules.items() if weights or _folder_files(listing, path)
        }
    return {"": True}


def select_files(model: HubModel, listing: Collection[str], read_json: Callable[[str], Any]) -> Selection:
    """The files of `model` its loaders read, from a listing of its repository (on the hub, or of a
    cached snapshot), and what they would read that the listing lacks. `read_json` reads a listed
    JSON file (model_index.json, modules.json, shard indexes)."""
    listing = set(listing)
    if model.layout == "dataset":  # read whole; a cut-off download lacks some of its numbered shards
        shards = [match for path in listing if (match := DATASET_SHARD.fullmatch(path))]
        wanted = {f"{m['stem']}-{i:05d}-of-{m['count']}.parquet" for m in shards for i in range(int(m["count"]))}
        return Selection(tuple(sorted(listing)), tuple(sorted(wanted - listing)))
    files: list[str] = [f for f in model.files if f in listing]
    lacking: list[str] = [f for f in model.files if f not in listing]
    if model.layout is None:
        return Selection(tuple(files), tuple(lacking))
    markers = LAYOUT_MARKERS[model.layout] if model.weights else CONFIG_MARKERS
    if not any(marker in listing for marker in markers):
        return Selection(tuple(files), (*lacking, " or ".join(markers)))
    suffixes = CONFIG_SUFFIXES + ((".py",) if model.trust_remote_code else ())
    folders = _model_folders(model, listing, read_json) if model.weights else {"": False}
    for folder, has_weights in folders.items():
        in_folder = _folder_files(listing, folder)
        if not in_folder:
            lacking.append(f"{folder}/")
        files.extend(p for p in in_folder if p.endswith(suffixes))
        if has_weights:
            weights = _weights(listing, folder, read_json)
            files.extend(weights.files)
            lacking.extend(weights.lacking)
    return Selection(tuple(dict.fromkeys(files)), tuple(lacking))


def repo_folder(cache_dir: str | Path, repo_id: str, repo_type: str = "model") -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type=repo_type)


def cached_commit(
    repo_id: str, revision: str | None, cache_dir: str | Path | None = None, repo_type: str = "model"
) -> str | None:
    """The commit the hub cache (HF_HOME's unless `cache_dir`) holds for a repository's revision: a
    commit as given, or the one its branch or tag pointed at when fetched; None when it has no such ref."""
    from huggingface_hub import constants

    revision = revision or "main"
    if COMMIT.fullmatch(revision):
        return revision
    ref = repo_folder(cache_dir or constants.HF_HUB_CACHE, repo_id, repo_type) / "refs" / revision
    return ref.read_text().strip() if ref.is_file() else None


def cache_state(model: HubModel, cache_dir: str | Path) -> CacheState:
    """Whether the cache holds `model` at its revision (a commit, or the commit its branch or tag
    pointed at when fetched) with every file the loaders read."""
    folder = repo_folder(cache_dir, model.repo_id, model.repo_type)
    snapshots = folder / "snapshots"
    held = sorted(p.name for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else []
    commit = cached_commit(model.repo_id, model.revision, cache_dir, model.repo_type)
    if commit not in held:
        return CacheState(None, other_commits=tuple(held))
    snapshot = snapshots / commit
    # A file is there when its link resolves: an interrupted download leaves no link, only a partial blob.
    listing = {p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()}
    selection = select_files(model, listing, lambda path: json.loads((snapshot / path).read_text()))
    return CacheState(commit, selection.lacking, tuple(c for c in held if c != commit))


def dataset_snapshot(repo_id: str, what: str) -> Path:
    """The snapshot folder of hub dataset `repo_id` (the `what` of the config: its release, its dataset)
    in the hub cache under HF_HOME, as `fetch-models` leaves it; where the hub is on (not in a job),
    what the cache lacks is downloaded first."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo_id, repo_type="dataset"))
    except RepositoryNotFoundError:
        raise ValueError(f"{what} {repo_id}: no such file or folder, nor a dataset on the hub") from None
    except LocalEntryNotFoundError:
        raise ValueError(
            f"{what} {repo_id}: not in the hub cache and the hub is off (HF_HUB_OFFLINE); run `blindspot "
            "fetch-models` where the hub answers, or give a local copy"
        ) from None
