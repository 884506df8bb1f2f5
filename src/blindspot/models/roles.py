"""Whether each model can do what its role asks of it, read from the model's own config.json.

A text-only model named where images go (`humblebench.vlms`, a VLM judge's `model`), or a VLM named
where transformers loads a causal LM, is accepted by the config's checks (the backend fits the role)
and fails only once a compute node has queued its job and loaded its weights. `blindspot doctor` and
`blindspot evaluate` read each such model's config.json first, wherever it is now: its built folder,
its local folder, or its snapshot in the hub cache (a model not yet there is the model checks' to
report). What decides, per library that loads it:

- transformers loads the image roles with AutoModelForImageTextToText and the text generators with
  AutoModelForCausalLM (`models.vlm_scoring`, `models.protoscore_model`, `models.textgen`). Each takes
  the model types of its mapping, or, with `trust_remote_code`, a remote model whose config's
  `auto_map` names the class (which a remote config class of its own needs): the test
  `from_pretrained` makes, read with this environment's transformers.
- vLLM takes images for the architectures its own registry marks multimodal, which cannot be read
  without vLLM. A model reads images when its config has a vision part (`vision_config`, as every
  VLM vLLM serves that we know of) or a model type transformers maps to images; it is text-only when
  transformers knows its type as a causal LM and nothing else; otherwise it cannot be told. vLLM
  generates text with any model it serves, so its text roles are not checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blindspot.hub.cache import cached_commit, repo_folder
from blindspot.hub.repos import model_source
from blindspot.io import read_json
from blindspot.plugins import plugin_declaration
from blindspot.registry import built_model_dir, is_api_model
from blindspot.registry import placed_models as placed_in_roles

# What transformers loads each kind of role with.
TRANSFORMERS_CLASSES = {"images": "AutoModelForImageTextToText", "text": "AutoModelForCausalLM"}


@dataclass(frozen=True)
class Fit:
    keys: tuple[str, ...]  # the config keys that place the model there
    name: str  # its registry name
    needs: str  # "images" or "text"
    loader: str  # the library that loads it: "transformers" or "vllm"
    takes: bool | None  # None: cannot be told from its config
    reason: str


def placed_models(config: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    """(config key, registry name, "images" or "text", loader) for every model placed in a role whose
    loader a config.json can be checked against: the image roles on any local backend, the text roles on
    transformers, and the models each built-in metric plug-in hands images (its module's `VLMS`: the
    argument, and the library that loads it whatever the model's backend, None for the backend)."""
    models = config["models"]
    for needs in ("images", "text"):
        for role, name in placed_in_roles(config):
            backend = models[name]["backend"]
            if is_api_model(models[name]):
                continue  # an endpoint has no config.json
            if role.needs == needs and (needs == "images" or backend == "transformers"):
                yield role.key, name, needs, backend
    for metric_name, metric in config["evaluation"]["metrics"].items():
        for argument, loader in plugin_declaration(metric["plugin"], "VLMS", {}).items():
            name = metric.get("model") if argument == "model" else metric.get("models", {}).get(argument)
            if name is not None and not is_api_model(models[name]):
                key = f"evaluation.metrics.{metric_name}.{'model' if argument == 'model' else f'models.{argument}'}"
                yield key, name, "images", loader or models[name]["backend"]


def model_folder(config: dict[str, Any], name: str, cache_dir: str | Path) -> Path | None:
    """Where a registry model's files are now: its built or local folder, or its cached snapshot; None
    when they are not there yet (or a local model is one file)."""
    entry = config["models"][name]
    source = model_source(entry)
    if source == "built":
        folder = built_model_dir(config, name)
    elif source == "local":
        folder = Path(entry["id"])
    else:
        commit = cached_commit(entry["id"], entry.get("revision"), cache_dir)
        folder = repo_folder(cache_dir, entry["id"]) / "snapshots" / str(commit)
    return folder if folder.is_dir() else None


def _fields(model: dict[str, Any]) -> tuple[str | None, list[str], dict[str, Any]]:
    """A config.json's model type, architectures and auto_map, each only when it has the right kind."""
    model_type = model.get("model_type")
    architectures = model.get("architectures")
    auto_map = model.get("auto_map")
    return (
        model_type if isinstance(model_type, str) else None,
        architectures if isinstance(architectures, list) and all(isinstance(a, str) for a in architectures) else [],
        auto_map if isinstance(auto_map, dict) else {},
    )


def _type_of(model: dict[str, Any]) -> str:
    model_type, architectures, _ = _fields(model)
    named = f"model type {model_type}" if model_type else "a config without a model_type"
    return named + (f" ({', '.join(architectures)})" if architectures else "")


def transformers_takes(model: dict[str, Any], needs: str, trust_remote_code: bool) -> tuple[bool, str]:
    """Whether transformers' auto class for `needs` loads this config.json, as `from_pretrained` decides:
    remote code that maps the class, else (unless a remote config class replaces the model type's) the
    model type in the class's mapping."""
    from transformers.models.auto import modeling_auto

    auto_class = TRANSFORMERS_CLASSES[needs]
    mapping = {
        "images": modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        "text": modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    }[needs]
    model_type, _, auto_map = _fields(model)
    if trust_remote_code and auto_class in auto_map:
        return True, f"its remote code maps {auto_class}"
    if trust_remote_code and "AutoConfig" in auto_map:
        return False, f"its remote code has its own config class and maps no {auto_class} ({_type_of(model)})"
    if model_type in mapping:
        return True, f"{auto_class} takes {_type_of(model)}"
    return False, f"transformers' {auto_class} does not take {_type_of(model)}"


def vllm_reads_images(model: dict[str, Any]) -> tuple[bool | None, str]:
    from transformers.models.auto import modeling_auto

    model_type, architectures, _ = _fields(model)
    if model.get("vision_config"):  # a null or empty one is no vision part
        return True, f"its config has a vision part ({_type_of(model)})"
    if model_type in modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return True, f"transformers maps {_type_of(model)} to images"
    if model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return False, f"a text-only model: {_type_of(model)}, no vision part in its config"
    listed = ", ".join(architectures) or "its architecture"
    return None, (
        f"cannot tell from its config whether vLLM reads images with {_type_of(model)}: it has no vision part; "
        f"check that vLLM lists {listed} among its multimodal models"
    )


def role_fits(config: dict[str, Any], cache_dir: str | Path) -> list[Fit]:
    """One verdict per model, kind of role and loader, for the models placed in checkable roles whose
    config.json is there now (see the module)."""
    placed: dict[tuple[str, str, str], list[str]] = {}
    for key, name, needs, loader in placed_models(config):
        placed.setdefault((name, needs, loader), []).append(key)
    fits = []
    for (name, needs, loader), keys in placed.items():
        folder = model_folder(config, name, cache_dir)
        if folder is None:
            continue
        try:
            model = read_json(folder / "config.json")
        except FileNotFoundError:
            takes, reason = None, f"{folder} has no config.json, which transformers and vLLM read its kind from"
        except ValueError as error:
            takes, reason = False, f"its config.json cannot be read: {error}"
        else:
            if loader == "transformers":
                remote = config["models"][name].get("trust_remote_code", False)
                takes, reason = transformers_takes(model, needs, remote)
            else:
                takes, reason = vllm_reads_images(model)
        fits.append(Fit(tuple(keys), name, needs, loader, takes, reason))
    return fits


def misplaced(fit: Fit) -> str:
    """One line for a model that cannot do what its role asks."""
    what = "read the images" if fit.needs == "images" else "generate the text"
    keys = f"config key{'s' if len(fit.keys) > 1 else ''} {', '.join(repr(key) for key in fit.keys)}"
    return f"{keys}: model '{fit.name}' cannot {what} its role asks for through {fit.loader}: {fit.reason}"
