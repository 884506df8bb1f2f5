"""`blindspot doctor`: a preflight before a run spends GPU-hours, one verdict per line.

- models: every model the run loads is in the hub cache at its pinned revision with the files its
  loader reads (`blindspot.hub.cache`), or would be fetched (the hub answers here); built models
  are built or will be (their archive is there); local weights exist;
- roles: each model there now can do what its role asks of it, read from its config.json: images
  where images go, a causal LM where transformers generates text (`blindspot.models.roles`);
- tokens: a gated model not yet cached has a token (HF_TOKEN or the token file) that opens it;
- API metrics: their key variable is set, and their endpoint answers (a short timeout; the key is
  never printed); a metric whose key is not set is a warning, as the run skips it (MetricSkipped), and
  its endpoint is not probed;
- budget: the API models' estimated cost (`blindspot plan`'s bill) is within the config's `budget`, a
  warning above it;
- disk: room in the hub cache for the models still to fetch (the registry's `weights_gb`), and in the
  results folder for the planned images and tables (an estimate from `blindspot plan`'s counts);
- with a profile: the variables it passes to jobs are set, conda (or its frontend) is on PATH when
  it deploys conda envs, and, for a SLURM profile, one canary job per distinct GPU count the plan
  asks for reports the GPUs it sees (nvidia-smi, else the CUDA_VISIBLE_DEVICES that SLURM sets).

A problem is a line with its reason, never a traceback; `doctor` exits 1 when any line is FAIL.
The checks of the models are `blindspot.doctor.models`, those of the machine and the cluster
`blindspot.doctor.system`, and the lines and their table `blindspot.doctor.report`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blindspot.config import ConfigError, read_yaml
from blindspot.doctor.models import api_checks, budget_checks, model_checks, role_checks
from blindspot.doctor.report import Check
from blindspot.doctor.system import canary_checks, disk_checks, profile_checks, profile_file, workstation_checks


def run_checks(
    config: dict[str, Any],
    profile: str | Path | None = None,
    cache_dir: str | Path | None = None,
    endpoint: str | None = None,
    canary_timeout_s: float = 600,
) -> list[Check]:
    """Every check for a run of `config` (with `profile`, a Snakemake profile folder or file)."""
    from huggingface_hub import constants

    cache_dir = cache_dir or constants.HF_HUB_CACHE
    endpoint = endpoint or constants.ENDPOINT
    checks = model_checks(config, cache_dir, endpoint) + role_checks(config, cache_dir)
    checks += api_checks(config) + budget_checks(config) + disk_checks(config, cache_dir)
    if profile is not None:
        path = profile_file(profile)
        settings = read_yaml(path, "profile") or {}
        if not isinstance(settings, dict):
            raise ConfigError(f"profile file {path}: holds a YAML {type(settings).__name__}, not a mapping of settings")
        checks += profile_checks(settings) + workstation_checks(config, settings)
        if settings.get("executor") == "slurm":
            checks += canary_checks(config, path, canary_timeout_s)
    return checks
