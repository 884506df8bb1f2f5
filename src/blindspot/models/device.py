"""The GPUs a job sees, the NVIDIA driver, and the step a process runs: what a job on a machine with
or without GPUs needs to know before it loads a model."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class GPUUnavailable(RuntimeError):
    """A model asks for more GPUs than the job sees, and the config does not let it run on the CPU."""


# The workflow step (rule) this process runs, for messages about what its job was given.
_RUNNING_STEP: ContextVar[str | None] = ContextVar("running_step", default=None)


@contextmanager
def running_step(step: str) -> Iterator[None]:
    """Name the workflow step that runs inside the block (stages sets it for every job)."""
    token = _RUNNING_STEP.set(step)
    try:
        yield
    finally:
        _RUNNING_STEP.reset(token)


def visible_gpus() -> int:
    """CUDA devices this process can use, counted through NVML (torch falls back to the CUDA runtime only
    where NVML does not answer). `torch.cuda.is_available()` asks the runtime, which initialises CUDA in
    this process, and a vLLM engine process forked after that cannot use CUDA ("CUDA error:
    initialization error"); vLLM counts the same way. A driver too old for torch's CUDA build is counted
    too: the job then fails at its first CUDA call, and `blindspot doctor`'s canary names the driver."""
    import torch

    return torch.cuda.device_count()


def nvidia_smi(query: str) -> tuple[list[str], str | None]:
    """The lines of `nvidia-smi --query-gpu=QUERY` (one per GPU, comma-separated fields, no units), or
    none and why there are none (no nvidia-smi: None; its own first line where it fails)."""
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return [], None
    lines = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode != 0:
        return [], lines[0] if lines else f"exit {done.returncode}"
    return [line.strip() for line in lines if line.strip()], None


def nvidia_driver() -> str:
    """The NVIDIA driver's version as nvidia-smi reports it, or why there is none."""
    lines, failure = nvidia_smi("driver_version")
    if failure:
        return f"no driver (nvidia-smi: {failure})"
    return f"driver {lines[0]}" if lines else "no driver"


def gpu_shortage(model: str, gpus: int, seen: int) -> str:
    """One line: the rule, the model, the GPUs it asked for and those the job sees, and the versions."""
    import torch

    step = _RUNNING_STEP.get()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (
        f"rule {step or '(none)'}: model '{model}' asks for {gpus} GPU(s), the job sees {seen} "
        f"(CUDA_VISIBLE_DEVICES={'unset' if visible is None else repr(visible)}; torch {torch.__version__} "
        f"built for CUDA {torch.version.cuda or 'none'}, {nvidia_driver()}); run it where its GPUs are, or set "
        "allow_cpu: true in the config to run GPU models on the CPU"
    )


def gpu_memory() -> dict[str, tuple[str, float]]:
    """Each GPU nvidia-smi lists, by index: its name and memory in GB; none where there is no driver."""
    found = {}
    for line in nvidia_smi("index,name,memory.total")[0]:
        index, name, mib = (part.strip() for part in line.split(",", 2))
        found[index] = (name, float(mib) * 2**20 / 1e9)
    return found
