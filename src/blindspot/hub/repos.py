"""What a run reads from the Hugging Face hub: the hub repositories (at their pinned revisions) of the
registry's models that a config's stages and metrics load, what of each it reads (its model folders, or
a release's checkpoint file), and the datasets a config names by hub id. The hub cache on disk is
`blindspot.hub.cache`; fetching into it, `blindspot.hub.fetch`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from blindspot.plugins import HubFiles, plugin_declaration
from blindspot.registry import BACKENDS, is_api_model, placed_models

# A hub repository id: organisation/name. Anything else in `id` is a local path.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# Files a dataset source may be, so never a hub id.
TABLE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
# What vLLM reads of a LoRA adapter's folder (PEFT's layout).
LORA_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class HubModel:
    """One hub repository at one revision, and what of it the run reads."""

    names: tuple[str, ...]  # the registry entries (or `metric.args.name`) that read it
    repo_id: str
    revision: str | None  # None: the default branch
    layout: str | None  # how its model folders are found (hub_cache.LAYOUT_MARKERS); None: only `files`
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
    reads = [(name, "model") for _, name in placed_models(config)]
    for metric in config["evaluation"]["metrics"].values():
        args, hub_files = metric.get("args", {}), plugin_declaration(metric["plugin"], "HUB_FILES", HubFiles())
        own = metric.get("model")  # none for a plug-in that loads no registry model
        if own and hub_files.checkpoint:
            reads.append((own, args.get("checkpoint", hub_files.checkpoint)))
            reads.extend(
                (own, str(args[arg])) for arg in hub_files.file_args if str(args.get(arg, "")).endswith(".json")
            )
        elif own:
            reads.append((own, "model"))
        reads.extend((name, "model") for name in metric.get("models", {}).values())
    # a LoRA adapter that vLLM applies to every request, in a folder of the model's repository
    reads.extend(
        (name, f"{lora['path']}/{file}")
        for name in sorted({name for name, _ in reads})
        if (lora := config["models"][name].get("lora"))
        for file in LORA_FILES
    )
    # build recipes that borrow another registry model's tokenizer
    loaded = {name for name, _ in reads}
    reads.extend(
        (entry["build"]["tokenizer_from"], "model")
        for name, entry in config["models"].items()
        if name in loaded and "tokenizer_from" in entry.get("build", {})
    )
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


def hub_datasets(config: dict[str, Any]) -> dict[str, str]:
    """The datasets the config names by hub id (not a local copy), by config key: HumbleBench's release
    and a released ProtoBias dataset to score. Jobs read them from the hub cache, which `fetch-models`
    fills (`hub_cache.dataset_snapshot`)."""
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
                names=(name,),
                repo_id=entry["id"],
                revision=entry.get("revision"),
                layout=BACKENDS[entry["backend"]].layout if "model" in read else None,
                files=tuple(sorted(read - {"model"})),
                gated=entry.get("gated", False),
                trust_remote_code=entry.get("trust_remote_code", False),
                weights_gb=entry.get("weights_gb", 0.0),
            )
        )
    found.extend(
        HubModel((key,), repo_id, None, "dataset", repo_type="dataset") for key, repo_id in hub_datasets(config).items()
    )
    for metric_name, metric in config["evaluation"]["metrics"].items():
        for arg, weights in plugin_declaration(metric["plugin"], "HUB_FILES", HubFiles()).repo_args.items():
            repo = metric.get("args", {}).get(arg)
            if repo and HUB_ID.fullmatch(repo) and not Path(repo).exists():
                found.append(HubModel((f"{metric_name}.args.{arg}",), repo, None, "transformers", weights=weights))
    merged: dict[tuple, HubModel] = {}
    for model in found:
        key = (model.repo_id, model.revision, model.layout, model.weights)
        if key in merged:
            known = merged[key]
            model = replace(
                known,
                names=known.names + model.names,
                files=tuple(sorted({*known.files, *model.files})),
                gated=known.gated or model.gated,
            )
        merged[key] = model
    return list(merged.values())
