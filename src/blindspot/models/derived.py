"""A registry entry derived from a model's own files, for `blindspot evaluate --vlm` and `--metric PLUGIN@MODEL`
given a hub id or a folder instead of a registry name: what a job asks for is read from the model's
config.json and weight files, as a person writing the entry would read them.

- **backend** of a model that answers about images (HumbleBench's VLMs, a plug-in's model that it declares
  in `VLMS`): transformers where its auto class for the role loads the model's type (as `from_pretrained`
  decides, `models.roles.transformers_takes`), else vLLM where vLLM is installed here and its registry
  serves the architecture with a vision part; a plug-in that names its loader (`VLMS`) gets that one. A
  model neither runs is refused in one line naming its architecture; one whose config maps its own code
  (`auto_map`) too, as running a repository's code is for its entry to allow (`trust_remote_code`). A
  plug-in's model that it does not declare there is read by the plug-in itself: transformers, the
  hub layout of any model folder.
- **dtype**: the config's (`dtype`, or `torch_dtype` before transformers 4.56), float32 where it names none.
- **weights_gb**: the weight files' size (one format: safetensors where there are any).
- **gpus**: half of a GPU's memory (`job_resources.gpu_memory_gb`) per GPU for the weights, the rest for
  activations and the KV cache, rounded up to a power of two for tensor parallelism.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blindspot.config import ConfigError
from blindspot.hub.cache import cached_commit, repo_folder
from blindspot.hub.repos import HUB_ID
from blindspot.io import read_json
from blindspot.models.roles import transformers_takes, vllm_reads_images

# Weight files by format, the first format present counted alone (a repository may ship two).
WEIGHT_FORMATS = ((".safetensors",), (".bin", ".pt", ".pth", ".ckpt"))
DTYPES = ("float32", "float16", "bfloat16")


def local_folder(source: str) -> Path | None:
    """`source` as a model's folder, or None where it is none."""
    folder = Path(source)
    return folder.resolve() if folder.is_dir() else None


def is_model_source(source: str) -> bool:
    """Whether `--vlm` or `--metric ...@` names a model by its files (a folder, a hub id), not by a registry name."""
    return local_folder(source) is not None or bool(HUB_ID.fullmatch(source))


def _weight_sizes(sizes: Mapping[str, int]) -> int:
    """The bytes of one format's weight files among {file name: bytes}."""
    for suffixes in WEIGHT_FORMATS:
        found = [size for name, size in sizes.items() if name.endswith(suffixes) and "/" not in name]
        if found:
            return sum(found)
    return 0


def _hub_files(repo_id: str, cache_dir: str | Path) -> tuple[dict[str, Any], dict[str, int]]:
    """A hub model's config.json and weight sizes: from its snapshot in the hub cache where it holds them,
    else from the hub."""
    commit = cached_commit(repo_id, None, cache_dir)
    snapshot = repo_folder(cache_dir, repo_id) / "snapshots" / str(commit)
    if commit and (snapshot / "config.json").is_file():
        return read_json(snapshot / "config.json"), {
            path.name: path.stat().st_size for path in snapshot.iterdir() if path.is_file()
        }
    from huggingface_hub import HfApi, constants, hf_hub_download

    try:
        config = read_json(hf_hub_download(repo_id, "config.json", cache_dir=cache_dir))
        info = HfApi().model_info(repo_id, files_metadata=True)
    except Exception as error:  # offline, gated, missing: each is the one line below
        said = str(error).strip().split(". ")[0].splitlines()
        reason = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else said[0] if said else type(error).__name__
        raise ConfigError(
            f"model {repo_id}: its config.json is not in the hub cache ({cache_dir}) and the hub did not give it "
            f"({reason}); fetch it first, or name its folder"
        ) from None
    return config, {sibling.rfilename: sibling.size or 0 for sibling in info.siblings or ()}


def model_files(source: str, cache_dir: str | Path) -> tuple[dict[str, Any] | None, float]:
    """A folder's or hub model's config.json (None: a folder without one) and its weights' size in GB."""
    folder = local_folder(source)
    if folder is not None:
        config = read_json(folder / "config.json") if (folder / "config.json").is_file() else None
        sizes = {path.name: path.stat().st_size for path in folder.iterdir() if path.is_file()}
    else:
        config, sizes = _hub_files(source, cache_dir)
    return config, round(_weight_sizes(sizes) / 1e9, 2)


def _dtype(model: Mapping[str, Any]) -> str:
    for part in (model, model.get("text_config") or {}):
        named = part.get("dtype") or part.get("torch_dtype")
        if named in DTYPES:
            return named
    return "float32"


def gpus_for(weights_gb: float, gpu_memory_gb: float) -> int:
    """GPUs for weights of `weights_gb`: half of each GPU's memory for them, a power of two."""
    needed = max(1, math.ceil(weights_gb / (gpu_memory_gb / 2)))
    return 2 ** math.ceil(math.log2(needed))


def _architecture(model: Mapping[str, Any]) -> str:
    architectures = model.get("architectures") or []
    named = ", ".join(architectures) if isinstance(architectures, list) else ""
    return f"{named or 'no architecture'} (model type {model.get('model_type') or 'none'})"


def vllm_serves(model: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether vLLM, where it is installed here, serves the model's architecture with its images."""
    try:
        from vllm import ModelRegistry
    except ImportError:
        return False, "vLLM is not installed here to read its registry"
    architectures = model.get("architectures") or []
    if not set(architectures) & set(ModelRegistry.get_supported_archs()):
        return False, "vLLM's registry does not list it"
    reads, reason = vllm_reads_images(dict(model))
    return bool(reads), reason


def backend_for(model: Mapping[str, Any], loader: str | None, source: str) -> str:
    """The backend that runs the model with images: `loader` where a plug-in names one, else transformers
    where it takes the model, else vLLM (module docstring); a ConfigError naming the architecture where none does."""
    if isinstance(model.get("auto_map"), dict) and model["auto_map"]:
        raise ConfigError(
            f"model {source}, {_architecture(model)}: its config maps the repository's own code (auto_map), which "
            "runs only from a registry entry that says trust_remote_code: true; write one after reading that code"
        )
    reasons = []
    for backend in (loader,) if loader else ("transformers", "vllm"):
        if backend == "transformers":
            takes, reason = transformers_takes(dict(model), "images", False)
        else:
            takes, reason = vllm_serves(model)
        if takes:
            return backend
        reasons.append(f"{backend}: {reason}")
    raise ConfigError(
        f"model {source}, {_architecture(model)}: no backend here runs it with images ({'; '.join(reasons)})"
    )


def derived_name(source: str, taken: Mapping[str, Any]) -> str:
    """A registry name for `source`: its folder's or repository's name, lower case; where the registry has
    that name for another model, the source's full path or id in it instead."""
    name = re.sub(r"[^a-z0-9._-]+", "-", Path(source).name.lower()).strip("-")
    if name in taken:
        name = re.sub(r"[^a-z0-9._-]+", "-", str(Path(source)).lower()).strip("-")
    return name


def derived_entry(
    source: str, config: Mapping[str, Any], cache_dir: str | Path, reads_images: bool = True, loader: str | None = None
) -> dict[str, Any]:
    """The registry entry of the model at `source` (a folder or hub id), one that answers about images or one
    a plug-in reads itself (module docstring); `loader`: the backend a plug-in loads it with, where it names one."""
    model, weights_gb = model_files(source, cache_dir)
    if model is None and reads_images:
        raise ConfigError(f"model {source}: no config.json, which transformers and vLLM read its architecture from")
    backend = backend_for(model, loader, source) if reads_images else "transformers"
    folder = local_folder(source)
    return {
        "id": str(folder) if folder is not None else source,
        "backend": backend,
        "gpus": gpus_for(weights_gb, config["job_resources"]["gpu_memory_gb"]),
        "weights_gb": weights_gb,
        "dtype": _dtype(model or {}),
    }
