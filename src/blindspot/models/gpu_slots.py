"""GPUs of its own for every job on one machine without SLURM (`profiles/workstation`).

Snakemake's local executor counts GPUs (`--resources gpu=N`) but hands out no device ids, so every
job would load onto device 0. A job that asks for N GPUs takes N device ids that no running job holds,
by an exclusive `flock` on one lock file per id, and sets `CUDA_VISIBLE_DEVICES` to them before torch
or vLLM is imported. The kernel releases a `flock` when the process that holds it ends, however it
ends (kill -9 included), so a killed job can never keep its GPUs and there is nothing to clean up.
The locks are per machine, not per run: two runs on one workstation share its GPUs too.

Which GPUs there are: the run's own `CUDA_VISIBLE_DEVICES` where it is set (a run narrowed to some
GPUs keeps to them), else the config's `workstation_gpus` (the profile sets it: a list of ids, or
`auto` for the machine's GPUs as `nvidia-smi` lists them). Under SLURM nothing changes: SLURM sets
`CUDA_VISIBLE_DEVICES` for each job. Nothing here imports torch: this module runs before it is imported.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from blindspot.models.device import nvidia_smi

LOCK_DIR_VARIABLE = "BLINDSPOT_GPU_LOCKS"  # tests point it at a folder of their own
WAIT_S = 600.0  # Snakemake starts a job only when its GPUs are free: a longer wait means fewer ids than `gpu:`
_held: list[IO[str]] = []  # the open lock files: held as long as this process lives


class NoFreeGPUs(RuntimeError):
    """A job waited for its GPUs longer than `WAIT_S`."""


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_VARIABLE) or Path(tempfile.gettempdir()) / "blindspot-gpu-locks")


def machine_gpus() -> list[str]:
    """The machine's GPUs as nvidia-smi numbers them; none where there is no driver."""
    return nvidia_smi("index")[0]


def gpu_pool(declared: str | Sequence[Any] | None, environ: dict[str, str] | None = None) -> list[str]:
    """The ids jobs may take: the run's `CUDA_VISIBLE_DEVICES`, else `declared` (a list, or `auto`)."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [part.strip() for part in visible.split(",") if part.strip()]
    if declared == "auto":
        return machine_gpus()
    return [str(gpu) for gpu in declared or []]


def _try_lock(gpu: str, folder: Path) -> IO[str] | None:
    handle = open(folder / f"gpu-{gpu.replace('/', '_')}.lock", "a+")  # noqa: SIM115 - held until the process ends
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def claim(
    count: int, pool: Sequence[str], wait_s: float = WAIT_S, sleep: Callable[[float], None] = time.sleep
) -> list[str]:
    """Take `count` ids of `pool` that no other process holds, waiting for them up to `wait_s`
    seconds; held until this process ends. All or none: a job never sits on part of its GPUs."""
    if count > len(pool):
        have = f"{len(pool)} ({', '.join(pool) or 'none'})"
        raise NoFreeGPUs(
            f"a job asks for {count} GPU(s) and this machine has {have}: set workstation_gpus in the "
            "profile, or lower the model's gpus"
        )
    folder = lock_dir()
    folder.mkdir(mode=0o777, parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    while True:
        taken: list[tuple[str, IO[str]]] = []
        for gpu in pool:
            handle = _try_lock(gpu, folder)
            if handle is not None:
                taken.append((gpu, handle))
                if len(taken) == count:
                    _held.extend(handle for _, handle in taken)
                    return [gpu for gpu, _ in taken]
        for _, handle in taken:
            handle.close()  # closing the file releases its lock
        if time.monotonic() >= deadline:
            raise NoFreeGPUs(
                f"no {count} of GPUs {', '.join(pool)} came free in {wait_s:.0f} s: another run, or a "
                f"program outside Snakemake, holds them (locks in {folder})"
            )
        sleep(1.0)


def claim_for_job(gpus: int, declared: str | Sequence[Any] | None, log_path: str | None = None) -> list[str] | None:
    """For a job of the workflow on one workstation (the config sets `workstation_gpus`; not under
    SLURM): claim its GPUs and set `CUDA_VISIBLE_DEVICES` to them (to none for a job that asks for
    none, so it never touches a GPU another job holds). The ids, with when they were taken, go to the
    job's log. None where nothing is claimed."""
    if declared is None or "SLURM_JOB_ID" in os.environ:
        return None
    ids = claim(gpus, gpu_pool(declared)) if gpus else []
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as log:
            log.write(f"blindspot: GPUs [{','.join(ids)}] held from {time.time():.3f} (pid {os.getpid()})\n")
        atexit.register(_say_released, log_path, ids)
    return ids


def _say_released(log_path: str, ids: list[str]) -> None:
    with open(log_path, "a") as log:
        log.write(f"blindspot: GPUs [{','.join(ids)}] released at {time.time():.3f}\n")
