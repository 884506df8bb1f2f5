"""Loading a model released as one checkpoint file: finding the file, reading its state dict, building
the model in its dtype, and loading every weight strictly, or by a map of the port's weight names to the
release's keys: every mapped key must be there, and no release key may be left over but those the port
knowingly drops. A checkpoint that does not fit is one error naming the keys."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def load_mapped_state_dict(
    model: Any,
    state_dict: Mapping[str, Any],
    wanted: Mapping[str, str],
    ignored: Collection[str],
    what: str,
    source: str | Path,
    strict: bool,
) -> None:
    """Load `state_dict[wanted[name]]` into each weight `name` of `model`; `ignored` release keys may be
    left over. `strict` as `load_state_dict` takes it (False where the port has tied copies)."""
    missing = [key for key in wanted.values() if key not in state_dict]
    left_over = sorted(set(state_dict) - set(wanted.values()) - set(ignored))
    problems = []
    for kind, keys in (("missing", missing), ("left over (not mapped)", left_over)):
        if keys:
            shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
            problems.append(f"{len(keys)} key(s) {kind}: {shown}")
    if problems:
        raise ValueError(f"{what} checkpoint {source} does not fit the port: {'; '.join(problems)}")
    model.load_state_dict({name: state_dict[key] for name, key in wanted.items()}, strict=strict)


CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")


def find_checkpoint(what: str, path: str | Path, revision: str | None, hub_file: str) -> Path:
    """The checkpoint file of a model released as one file: `path` itself; in the folder `path`, the
    file named `hub_file`, else its one checkpoint file; or `hub_file` in the hub repository `path`
    (from the local hub cache when offline)."""
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        if (path / hub_file).is_file():
            return path / hub_file
        found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(CHECKPOINT_SUFFIXES))
        if len(found) != 1:
            held = f"several ({', '.join(p.name for p in found)})" if found else "none"
            raise FileNotFoundError(
                f"{what} model folder {path} must hold exactly one checkpoint file "
                f"({', '.join(CHECKPOINT_SUFFIXES)}); it holds {held}"
            )
        return found[0]
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(str(path), hub_file, revision=revision))


def read_state_dict(checkpoint: Path) -> dict[str, Any]:
    """The state dict in a checkpoint: a safetensors file, or a torch file holding either the state
    dict or a dict with it under `state_dict` (HPSv2's and AlignScore's releases, Lightning's format).
    Torch files load with `weights_only`: a checkpoint that needs arbitrary unpickling is refused."""
    import torch

    if checkpoint.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(checkpoint)
    loaded = torch.load(checkpoint, map_location="cpu", weights_only=True)
    return loaded.get("state_dict", loaded)


@contextmanager
def default_dtype(dtype: Any) -> Iterator[None]:
    """Modules made inside the block are made in `dtype`: an 11B model built in float32 and then cast
    would take twice its weights on the GPU first."""
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def load_strictly(model: Any, state_dict: dict[str, Any], mismatch: str) -> None:
    """Load every weight and nothing else (as the official scorers do); otherwise raise `mismatch`
    followed by what is missing and what is left over."""
    result = model.load_state_dict(state_dict, strict=False)
    problems = []
    for what, keys in (("missing", result.missing_keys), ("unexpected", result.unexpected_keys)):
        if keys:
            shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
            problems.append(f"{len(keys)} {what} key(s): {shown}")
    if problems:
        raise ValueError(f"{mismatch}: {'; '.join(problems)}")
