"""The registry's Hugging Face models (and the datasets a config names by hub id) on this machine:
which hub repositories a run reads, which of their files the code loads, whether the local
hub cache holds them at the pinned revision, and fetching them.

Compute nodes have no internet, and the SLURM profile switches the hub off in jobs, so a job reads its
weights from the cache under HF_HOME only. `blindspot fetch-models` fills that cache on the login
node and `blindspot doctor` checks it; both decide what a model needs with `select_files`, so what
is fetched is what is checked. Only the files the loaders read are fetched: configs, tokenizers and
the weights in the format the libraries pick (safetensors over .bin, the shards an index names,
never a release's single-file original, ONNX/GGUF copies or fp16 variants), of a metric released
as one checkpoint file (ImageReward, HPSv2, AlignScore) that file, and of a dataset every file.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from blindspot.config import MODEL_ROLES, SCENE_GRAPH_ROLES, built_model_dir, is_api_model
from blindspot.metrics import align_score, hpsv2, image_reward

# A hub repository id: organisation/name. Anything else in `id` is a local path.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
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
# Files a dataset source may be, so never a hub id.
TABLE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
# A dataset's parquet shards as the hub names them: each says how many there are.
DATASET_SHARD = re.compile(r"(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.parquet")
BACKEND_LAYOUTS = {"transformers": "transformers", "vllm": "transformers", "open_clip": "transformers",
                   "sentence_transformers": "sentence_transformers", "diffusers": "diffusers"}  # fmt: skip
# What a metric plug-in reads from its model's repository when not the whole model folder: the one
# checkpoint file of the release (the plug-in's `checkpoint` argument renames it), and arguments that
# name a file beside it (HPSv2's architecture, when a .json config).
PLUGIN_CHECKPOINTS = {
    "align_score": align_score.HUB_CHECKPOINT,
    "image_reward": image_reward.HUB_CHECKPOINT,
    "hpsv2": hpsv2.HUB_CHECKPOINT,
}
PLUGIN_FILE_ARGS = {"hpsv2": ("architecture",)}
# Plug-in arguments that name another hub repository the plug-in reads at the default revision, each
# with whether its weights are read too or its configs and tokenizer only: PickScore's processor,
# AlignScore's base, ImageReward's tokenizer, CLIP-FlanT5's tokenizer and vision tower. The official
# CLIP-FlanT5 builds its tower from the tower's own weights before loading the release over them, so
# they are fetched whatever the release holds.
PLUGIN_REPO_ARGS = {
    "clip_similarity": {"processor": False},
    "align_score": {"base": False},
    "image_reward": {"tokenizer": False},
    "clip_flant5": {"tokenizer": False, "vision_tower": True},
}


class HubError(RuntimeError):
    """A model that cannot be fetched; the message is one line naming it and what to do."""


@dataclass(frozen=True)
class HubModel:
    """One hub repository at one revision, and what of it the run reads."""

    names: tuple[str, ...]  # the registry entries (or `metric.args.name`) that read it
    repo_id: str
    revision: str | None  # None: the default branch
    layout: str | None  # how its model folders are found (LAYOUT_MARKERS); None: only `files`
    weights: bool = True  # the folders' weights too, or their configs and tokenizer only
    files: tuple[str, ...] = ()  # single files read by name (a release checkpoint)
    gated: bool = False
    trust_remote_code: bool = False
    weights_gb: float = 0.0
    repo_type: str = "model"  # or "dataset" (`hub_datasets`)

    @property
    def label(self) -> str:
        return ", ".join(self.names)

    @property
    def at(self) -> str:
        return f"{self.repo_id}@{self.revision or 'main'}"


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


def model_source(entry: dict[str, Any]) -> str:
    """Where a registry entry's model comes from: "api", "built" (a recipe), "local" (a path) or "hub"."""
    if is_api_model(entry):
        return "api"
    if "build" in entry:
        return "built"
    # pyiqa never downloads (iqa.weights_file); an existing path is read as one by every loader.
    if entry["backend"] == "pyiqa" or Path(entry["id"]).exists() or not HUB_ID.fullmatch(entry["id"]):
        return "local"
    return "hub"


def _reads(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(registry name, what is read) for every model a job loads: "model" for its folders, or the
    file name of a release checkpoint that a metric plug-in reads instead."""
    reads = []
    for stage, role in MODEL_ROLES:
        value = config[stage][role]
        reads.extend((name, "model") for name in ([value] if isinstance(value, str) else value))
    for metric in config["evaluation"]["metrics"].values():
        plugin, args = metric["plugin"], metric.get("args", {})
        if plugin in PLUGIN_CHECKPOINTS:
            reads.append((metric["model"], args.get("checkpoint", PLUGIN_CHECKPOINTS[plugin])))
            reads.extend((metric["model"], str(args[arg])) for arg in PLUGIN_FILE_ARGS.get(plugin, ())
                         if str(args.get(arg, "")).endswith(".json"))  # fmt: skip
        else:
            reads.append((metric["model"], "model"))
        reads.extend((name, "model") for name in metric.get("models", {}).values())
    scene_graphs = config["humblebench"].get("scene_graphs") or {}
    reads.extend((scene_graphs[role], "model") for role in SCENE_GRAPH_ROLES if role in scene_graphs)
    # build recipes that borrow another registry model's tokenizer
    loaded = {name for name, _ in reads}
    reads.extend((entry["build"]["tokenizer_from"], "model") for name, entry in config["models"].items()
                 if name in loaded and "tokenizer_from" in entry.get("build", {}))  # fmt: skip
    return reads


def used_models(config: dict[str, Any]) -> list[str]:
    """Registry names the run loads, in registry order: the stages' models, the metrics' models,
    HumbleBench's scene-graph models, and the models that build recipes borrow a tokenizer from."""
    loaded = {name for name, _ in _reads(config)}
    return [name for name in config["models"] if name in loaded]


def is_hub_dataset(source: str) -> bool:
    """Whether a dataset source (a release, a dataset to score) names a hub dataset, not a local file or folder."""
    path = Path(source)
    return bool(HUB_ID.fullmatch(source)) and path.suffix not in TABLE_SUFFIXES and not path.exists()


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


def hub_datasets(config: dict[str, Any]) -> dict[str, str]:
    """The datasets the config names by hub id (not a local copy), by config key: HumbleBench's release
    and a released ProtoBias dataset to score. Jobs read them from the hub cache, which `fetch-models`
    fills (`dataset_snapshot`)."""
    named = {
        "humblebench.release": config["humblebench"].get("release"),
        "dataset.path": config.get("dataset", {}).get("path"),
    }
    return {key: value for key, value in named.items() if value and is_hub_dataset(value)}


def hub_models(config: dict[str, Any]) -> list[HubModel]:
    """Every hub repository the run reads, one per repository and revision (two registry entries of
    the same weights, one through vLLM and one through transformers, are fetched once), and the
    datasets the config names by hub id (`hub_datasets`)."""
    reads: dict[str, set[str]] = {}
    for name, read in _reads(config):
        reads.setdefault(name, set()).add(read)
    found: list[HubModel] = []
    for name in used_models(config):
        entry, read = config["models"][name], reads[name]
        if model_source(entry) != "hub":
            continue
        found.append(
            HubModel(
                names=(name,), repo_id=entry["id"], revision=entry.get("revision"),
                layout=BACKEND_LAYOUTS.get(entry["backend"], "transformers") if "model" in read else None,
                files=tuple(sorted(read - {"model"})), gated=entry.get("gated", False),
                trust_remote_code=entry.get("trust_remote_code", False), weights_gb=entry.get("weights_gb", 0.0),
            )
        )  # fmt: skip
    found.extend(
        HubModel((key,), repo_id, None, "dataset", repo_type="dataset") for key, repo_id in hub_datasets(config).items()
    )
    for metric_name, metric in config["evaluation"]["metrics"].items():
        for arg, weights in PLUGIN_REPO_ARGS.get(metric["plugin"], {}).items():
            repo = metric.get("args", {}).get(arg)
            if repo and HUB_ID.fullmatch(repo) and not Path(repo).exists():
                found.append(HubModel((f"{metric_name}.args.{arg}",), repo, None, "transformers", weights=weights))
    merged: dict[tuple, HubModel] = {}
    for model in found:
        key = (model.repo_id, model.revision, model.layout, model.weights)
        if key in merged:
            known = merged[key]
            model = replace(known, names=known.names + model.names, files=tuple(sorted({*known.files, *model.files})),
                            gated=known.gated or model.gated)  # fmt: skip
        merged[key] = model
    return list(merged.values())


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
        folders = {name: f"{name}/config.json" in listing for name, value in components.items()
                   if isinstance(value, list) and value[0] is not None}  # fmt: skip
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


def unreachable(endpoint: str, timeout_s: float = 5.0) -> str | None:
    """Why the hub cannot be reached from here, or None when it answers. (The hub client retries a
    refused connection for half a minute; this asks once.)"""
    import requests
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    try:
        requests.head(f"{endpoint}/api/models", timeout=timeout_s)
    except requests.RequestException as error:
        return f"{endpoint} does not answer ({type(error).__name__})"
    return None


def has_token() -> bool:
    from huggingface_hub import get_token

    return get_token() is not None


def gated_advice(model: HubModel, endpoint: str) -> str:
    return (
        f"{model.label}: {model.repo_id} is gated on the hub: accept its terms at {endpoint}/{model.repo_id} "
        "with your account, then set HF_TOKEN or run `hf auth login`"
    )


def fetch(model: HubModel, cache_dir: str | Path, endpoint: str | None = None) -> Path:
    """Download the files of `model` its loaders read into the hub cache, with progress bars, and return
    the snapshot folder; HubError with one line on any hub error. Files already in the cache are not
    downloaded again, so a fetch that was stopped goes on with the files still missing."""
    from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    endpoint = endpoint or constants.ENDPOINT
    if model.gated and not has_token():
        raise HubError(gated_advice(model, endpoint) + " (no token found)")
    where = {"cache_dir": str(cache_dir), "endpoint": endpoint, "revision": model.revision,
             "repo_type": model.repo_type}  # fmt: skip
    try:
        listing = HfApi(endpoint=endpoint).list_repo_files(
            model.repo_id, revision=model.revision, repo_type=model.repo_type
        )
        selection = select_files(
            model, listing, lambda path: json.loads(Path(hf_hub_download(model.repo_id, path, **where)).read_text())
        )
        if selection.lacking:
            raise HubError(f"{model.label}: {model.at} lacks {', '.join(selection.lacking)}, which its loader reads")
        return Path(snapshot_download(model.repo_id, allow_patterns=list(selection.files), **where))
    except HubError:
        raise
    except GatedRepoError:
        raise HubError(gated_advice(model, endpoint) + (" (the token has no access)" if has_token() else "")) from None
    except RevisionNotFoundError:
        raise HubError(f"{model.label}: revision '{model.revision}' of {model.repo_id} is not on the hub") from None
    except RepositoryNotFoundError:
        raise HubError(f"{model.label}: {model.repo_id} is not on the hub (or private to others)") from None
    # The rest: HTTP errors, and connection errors, which come from the hub client's HTTP library
    # (httpx2 here) without a base class in common with the hub's own.
    except Exception as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise HubError(f"{model.label}: {model.at} could not be fetched from {endpoint}: {reason}") from None


def skipped_reason(config: dict[str, Any], name: str) -> str | None:
    """Why a used registry model needs no fetching (None for a hub model)."""
    entry = config["models"][name]
    source = model_source(entry)
    if source == "api":
        return f"an API model at {entry['endpoint']}"
    if source == "built":
        return f"built by build_model (recipe {entry['build']['recipe']}) into {built_model_dir(config, name)}"
    if source == "local":
        missing = "" if Path(entry["id"]).exists() else " (missing: put the file there)"
        return f"read from the local path {entry['id']}{missing}"
    return None


def fetch_models(
    config: dict[str, Any], cache_dir: str | Path | None = None, dry_run: bool = False, endpoint: str | None = None,
    out: TextIO | None = None,
) -> int:  # fmt: skip
    """`blindspot fetch-models`: one line per model, fetch what the cache (by default HF_HOME's)
    lacks; 1 if any failed."""
    from huggingface_hub import constants

    out = out or sys.stdout
    cache_dir = cache_dir or constants.HF_HUB_CACHE
    endpoint = endpoint or constants.ENDPOINT
    states = {model: cache_state(model, cache_dir) for model in hub_models(config)}
    missing = not all(state.complete for state in states.values())
    if missing and not dry_run and (reason := unreachable(endpoint)):
        raise HubError(
            f"cannot fetch: {reason} (on a login node with internet: HF_HUB_OFFLINE=0 blindspot fetch-models)"
        )
    out.write(f"Hugging Face cache: {cache_dir}\n")
    for name in used_models(config):
        if reason := skipped_reason(config, name):
            out.write(f"skip     {name}: {reason}\n")
    failed = 0
    for model, state in states.items():
        if state.complete:
            out.write(f"cached   {model.label}: {model.at} ({state.commit[:12]})\n")
        elif dry_run:
            gated = " (gated: no token found)" if model.gated and not has_token() else ""
            out.write(f"to fetch {model.label}: {model.at}{gated}\n")
        else:
            out.write(f"fetching {model.label}: {model.at}\n")
            out.flush()
            try:
                snapshot = fetch(model, cache_dir, endpoint)
                out.write(f"fetched  {model.label}: {model.at} ({snapshot.name[:12]})\n")
            except HubError as error:
                failed += 1
                out.write(f"FAILED   {error}\n")
        out.flush()
    if failed:
        out.write(f"{failed} model(s) could not be fetched\n")
    return 1 if failed else 0
