"""The checks of `blindspot doctor` on the machine and the cluster a run goes to: room on disk for the
models to fetch and for what the run writes; with a profile, the variables it passes to jobs and conda
where it deploys conda envs; with a SLURM profile, canary jobs that report the GPUs they see and
whether their driver runs this environment's torch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from blindspot import plan
from blindspot.config import as_list
from blindspot.doctor.report import FAIL, OK, WARN, Check
from blindspot.hub import cache as hub_cache
from blindspot.hub import repos as hub
from blindspot.models.device import gpu_memory
from blindspot.models.gpu_slots import gpu_pool
from blindspot.slurm import profile_resources, with_partition

GB = 1e9
# The disk estimate. A rendered PNG takes about half of its raw 3 bytes per pixel; the dataset export
# embeds every kept image a second time; HumbleBench's release images are COCO-sized; a table row
# (parquet, with its share of the counters and logs) takes about a kilobyte.
PNG_BYTES_PER_PIXEL = 1.5
RELEASE_IMAGE_PIXELS = 640 * 480
ROW_BYTES = 1024
# The oldest Linux driver each CUDA major version runs on (NVIDIA's CUDA toolkit release notes).
MIN_DRIVER = {11: 450, 12: 525, 13: 580}
# What a canary job prints: the GPUs nvidia-smi lists and its driver, and what SLURM made visible.
CANARY_SCRIPT = (
    'echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-}"; '
    "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L; "
    'nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1 | sed "s/^/driver=/"; fi'
)


def _size(size: float) -> str:
    return f"{size / GB:.1f} GB" if size >= GB / 10 else f"{size / 1e6:.1f} MB"


def _free_bytes(path: Path) -> tuple[Path, int]:
    """Free bytes on the file system that `path` is (or will be) on: its nearest existing folder's."""
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return path, shutil.disk_usage(path).free


def planned_bytes(config: dict[str, Any]) -> tuple[float, str]:
    """An upper estimate of what the run writes under its results folder, and how it was made."""
    jobs = plan.job_table(config)
    renders = jobs[jobs["rule"] == "render_images"].groupby("model")["items_upper"].sum()
    images = image_bytes = 0
    sizes = set()
    for t2i, count in renders.items():
        render = config["models"][t2i].get("render", {})
        height, width = render.get("height", 1024), render.get("width", 1024)
        sizes.add(f"{height}x{width}")
        images += int(count)
        image_bytes += int(count) * height * width * PNG_BYTES_PER_PIXEL
    questions = config["humblebench"].get("release_questions", 0) if config["humblebench"].get("release") else 0
    rows = int(jobs["items_upper"].fillna(0).sum())
    total = 2 * image_bytes + questions * RELEASE_IMAGE_PIXELS * PNG_BYTES_PER_PIXEL + rows * ROW_BYTES
    how = (
        f"{images} images at {', '.join(sorted(sizes))} as PNG (~{PNG_BYTES_PER_PIXEL:g} bytes/pixel), twice with "
        f"the dataset export; {questions} HumbleBench release images at 640x480; {rows} table rows at ~1 KB"
    )
    return total, how


def disk_checks(config: dict[str, Any], cache_dir: str | Path) -> list[Check]:
    checks = []
    to_fetch = [m for m in hub.hub_models(config) if not hub_cache.cache_state(m, cache_dir).complete]
    if to_fetch:
        need = sum(m.weights_gb for m in to_fetch) * GB
        where, free = _free_bytes(Path(cache_dir))
        reason = f"{_size(free)} free at {where}; the {len(to_fetch)} models to fetch take ~{_size(need)}"
        checks.append(Check("disk", "hub cache", OK if free >= need else FAIL, reason + " (their weights_gb)"))
    need, how = planned_bytes(config)
    where, free = _free_bytes(Path(config["results_dir"]))
    reason = f"{_size(free)} free at {where}; the run writes up to ~{_size(need)} ({how})"
    checks.append(Check("disk", "results", OK if free >= need else FAIL, reason))
    return checks


def profile_file(profile: str | Path) -> Path:
    """The profile's settings file: a profile folder's config.yaml (Snakemake 8's config.v8+.yaml
    first), or the file itself."""
    path = Path(profile)
    if path.is_dir():
        path = next(
            (path / n for n in ("config.v8+.yaml", "config.yaml") if (path / n).is_file()), path / "config.yaml"
        )
    if not path.is_file():
        raise ValueError(f"profile {profile}: no such folder, or no config.yaml in it")
    return path


def profile_checks(profile: dict[str, Any]) -> list[Check]:
    """The variables the profile passes to jobs are set; conda is there when it deploys conda envs."""
    checks = []
    for variable in profile.get("envvars", []):
        if os.environ.get(variable):
            checks.append(Check("env", variable, OK, "set (the profile passes it to every job)"))
        else:
            reason = "not set: Snakemake refuses to start without it (the profile's envvars)"
            checks.append(Check("env", variable, FAIL, reason))
    methods = profile.get("software-deployment-method", [])
    if "conda" in as_list(methods):
        frontend = profile.get("conda-frontend", "conda")
        found = shutil.which(frontend)
        if found:
            checks.append(Check("conda", frontend, OK, f"{found} (the profile deploys conda envs)"))
        else:
            reason = (
                f"`{frontend}` is not on PATH, and the profile deploys conda envs (software-deployment-method: "
                "conda): install Miniforge or load its module"
            )
            checks.append(Check("conda", frontend, FAIL, reason))
    return checks


def workstation_checks(config: dict[str, Any], profile: dict[str, Any]) -> list[Check]:
    """For a profile that gives jobs GPUs of their own (`workstation_gpus`): the GPUs there are, their
    memory, whether Snakemake's `gpu:` count matches them, and whether the largest job fits."""
    declared = (profile.get("config") or {}).get("workstation_gpus")
    if declared is None:
        return []
    pool, memory = gpu_pool(declared), gpu_memory()
    if not pool:
        return [Check("gpus", "workstation", FAIL, "nvidia-smi lists no GPU: list their ids in workstation_gpus")]
    known = [memory[gpu] for gpu in pool if gpu in memory]
    shown = ", ".join(f"{gpu}: {memory[gpu][0]} {memory[gpu][1]:.0f} GB" if gpu in memory else gpu for gpu in pool)
    where = f"workstation_gpus: {declared}"
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        where = "the run's CUDA_VISIBLE_DEVICES"
    checks = [Check("gpus", "workstation", OK, f"{len(pool)} GPU(s) for jobs ({where}): {shown}")]
    count = (profile.get("resources") or {}).get("gpu")
    if count != len(pool):
        reason = f"the profile's gpu: {count} lets Snakemake run jobs asking for that many GPUs at once"
        checks.append(Check("gpus", "gpu count", WARN, f"{reason}, and there are {len(pool)}: make them equal"))
    jobs = plan.job_table(config)
    jobs = jobs[jobs["gpus"] > 0]
    if jobs.empty:
        return checks
    # The model a job's GPUs are for (`catalogue.job_model`), its weights spread over them.
    per_gpu = jobs["model"].map(lambda name: config["models"].get(name, {}).get("weights_gb", 0)) / jobs["gpus"]
    largest = jobs.loc[per_gpu.idxmax()]
    need = f"{largest['model']} ({largest['rule']} {largest['job']}): {largest['gpus']} GPU(s)"
    need += f", {per_gpu.max():.1f} GB of weights on each"
    if jobs["gpus"].max() > len(pool):
        widest = jobs.loc[jobs["gpus"].idxmax()]
        reason = f"job {widest['rule']} {widest['job']} asks for {widest['gpus']} GPUs; the machine has {len(pool)}"
        checks.append(Check("gpus", "largest job", FAIL, reason))
    elif known and per_gpu.max() > min(size for _, size in known):
        reason = f"{need}, more than the smallest GPU's {min(size for _, size in known):.0f} GB"
        checks.append(Check("gpus", "largest job", FAIL, reason))
    else:
        memory_said = f"; the smallest GPU has {min(size for _, size in known):.0f} GB" if known else ""
        checks.append(Check("gpus", "largest job", OK, need + memory_said + " (weights only)"))
    return checks


def driver_of(output: str) -> str | None:
    """The NVIDIA driver a canary job reported, if it had nvidia-smi."""
    return next((line.removeprefix("driver=") for line in output.splitlines() if line.startswith("driver=")), None)


def driver_too_old(driver: str, cuda: str | None) -> str | None:
    """Why `driver` cannot run torch built for CUDA `cuda` (this environment's torch, the version every
    GPU env pins), or None: CUDA's minimum Linux driver for its major version."""
    need = MIN_DRIVER.get(int(cuda.split(".")[0])) if cuda else None
    major = re.match(r"\d+", driver)
    if need is None or major is None or int(major.group()) >= need:
        return None
    too_old = f"driver {driver} is older than torch's CUDA {cuda} needs (>= {need})"
    return f"{too_old}: every GPU job would fail at its first CUDA call"


def gpus_seen(output: str) -> tuple[int, str]:
    """GPUs a canary job saw, and what it said: nvidia-smi's list and driver, else CUDA_VISIBLE_DEVICES."""
    lines = output.splitlines()
    listed = [line for line in lines if re.match(r"GPU \d+:", line)]
    driver = driver_of(output)
    if driver is not None:
        names = sorted({re.sub(r"^GPU \d+: | \(UUID.*$", "", line) for line in listed})
        return len(listed), f"{', '.join(names) or 'no GPU'} (driver {driver})"
    visible = next((line.split("=", 1)[1] for line in lines if line.startswith("CUDA_VISIBLE_DEVICES=")), "")
    devices = [d for d in visible.split(",") if d.strip() and d != "NoDevFiles"]
    return len(devices), f"no nvidia-smi; CUDA_VISIBLE_DEVICES={visible or '(unset)'}"


def canary_command(gpus: int, resources: dict[str, Any], name: str, output: Path) -> list[str]:
    """sbatch for a short job asking for `gpus`, spelled as the SLURM plugin spells the request."""
    request = f"{resources['gpu_model']}:{gpus}" if resources.get("gpu_model") else str(gpus)
    command = [
        "sbatch",
        "--wait",
        f"--job-name={name}",
        f"--output={output}",
        "--time=5",
        "--mem=500",
        "--cpus-per-task=1",
        f"--gpus={request}",
    ]
    for key, flag in (("slurm_partition", "--partition"), ("slurm_account", "--account")):
        if resources.get(key):
            command.append(f"{flag}={resources[key]}")
    return [*command, "--wrap", CANARY_SCRIPT]


def torch_cuda() -> str | None:
    """The CUDA version this environment's torch is built for: the t2i, vlm, nlp and iqa envs pin the same torch."""
    import torch

    return torch.version.cuda


def canary_checks(config: dict[str, Any], profile: Path, timeout_s: float) -> list[Check]:
    """One SLURM job per distinct GPU count of the plan's jobs, all at once, each with the partition,
    account and GPU model the profile gives the first rule that asks for that count (without a partition
    there, the one the SLURM plugin would pick from the profile's partitions file for a job of that count)."""
    jobs = plan.job_table(config)
    rules: dict[int, str] = {}
    for rule, gpus in zip(jobs["rule"], jobs["gpus"], strict=True):
        if gpus > 0:
            rules.setdefault(int(gpus), rule)
    if not rules:
        return []
    if shutil.which("sbatch") is None:
        return [Check("gpus", "canary", FAIL, "sbatch is not on PATH, and the profile's executor is slurm")]
    folder = Path(config["results_dir"]) / "logs" / "doctor"
    folder.mkdir(parents=True, exist_ok=True)
    submitted = {}
    for gpus, rule in sorted(rules.items()):
        output = folder / f"canary-{gpus}gpu.out"
        output.unlink(missing_ok=True)
        name = f"blindspot-canary-{gpus}gpu-{os.getpid()}"
        resources = with_partition(rule, profile_resources(rule, 1, profile), 1, gpus, profile)
        command = canary_command(gpus, resources, name, output)
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        submitted[gpus] = (rule, name, output, process)
    deadline = time.monotonic() + timeout_s
    checks = []
    for gpus, (rule, name, output, process) in submitted.items():
        subject = f"{gpus} GPU{'s' if gpus > 1 else ''} ({rule})"
        try:
            stdout, stderr = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            subprocess.run(["scancel", f"--name={name}"], capture_output=True, check=False)
            late = f"the canary job did not finish within {timeout_s:g} s (still queued?); cancelled"
            checks.append(Check("gpus", subject, WARN, late))
            continue
        if process.returncode != 0:
            said = (stderr.strip() or stdout.strip() or "no message").splitlines()[-1]
            checks.append(
                Check("gpus", subject, FAIL, f"the canary job failed (sbatch exit {process.returncode}): {said}")
            )
            continue
        said = output.read_text() if output.is_file() else ""
        seen, what = gpus_seen(said)
        verdict = OK if seen == gpus else FAIL if seen < gpus else WARN
        note = " (more than asked: the node does not confine jobs to their GPUs)" if seen > gpus else ""
        checks.append(Check("gpus", subject, verdict, f"asked for {gpus}, the job sees {seen}: {what}{note}"))
        if (driver := driver_of(said)) and (old := driver_too_old(driver, torch_cuda())):
            checks.append(Check("driver", subject, FAIL, old))
    return checks
