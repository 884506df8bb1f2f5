"""`blindspot fetch-models`: download into the hub cache the files of every hub repository a run reads
(`blindspot.hub.repos`) that the cache (`blindspot.hub.cache`) lacks, and say why the hub cannot
be reached or a gated model opened.

Compute nodes have no internet, and the SLURM profile switches the hub off in jobs, so a job reads its
weights from the cache under HF_HOME only: this fills it on the login node, and `blindspot doctor`
checks it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from blindspot.hub.cache import cache_state, select_files
from blindspot.hub.repos import HubModel, hub_models, model_source, used_models
from blindspot.registry import built_model_dir


class HubError(RuntimeError):
    """A model that cannot be fetched; the message is one line naming it and what to do."""


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
    where = {
        "cache_dir": str(cache_dir),
        "endpoint": endpoint,
        "revision": model.revision,
        "repo_type": model.repo_type,
    }
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
    config: dict[str, Any],
    cache_dir: str | Path | None = None,
    dry_run: bool = False,
    endpoint: str | None = None,
    out: TextIO | None = None,
) -> int:
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
