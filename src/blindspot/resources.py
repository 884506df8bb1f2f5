"""What one job asks the cluster for: GPUs, CPUs, host memory and time, from what the job loads.

`job_resources` is the one place these are decided. The rules (workflow/rules/common.smk), `blindspot
plan` and `blindspot.slurm.submit_stage` all call it, so a job asks SLURM for what the plan shows, and
no rule that loads a model can be left on a profile's default.

- GPUs: the most any of the job's models needs (`catalogue.job_gpus`; also vLLM's tensor parallelism); a
  metric that loads no registry model asks for what its entry's `resources` say, else none.
- CPUs (threads): `threads_per_gpu` for each GPU; `cpu_threads` for a job that runs models or decodes
  images without a GPU; 1 for the table rules. Snakemake sets OMP_NUM_THREADS to the same number.
- Host memory: `base_mb` (interpreter, torch, CUDA context, the job's tables) + the largest model's
  weights (the registry's `weights_gb`: weights pass through host memory on their way to the GPU, and
  stay there on a CPU; models load one after another) + the images in flight (the stage's batch size,
  twice for the batch being decoded, at the largest render size, `bytes_per_pixel` each). Images are
  read batch by batch, so this does not grow with the shard.
- Time: the job's loading (`load_seconds`: each model's weights read at `load_gb_per_second`, then its
  engine started) and its items (`catalogue.job_items`) times the `throughput:` table's seconds per item,
  together times `runtime_margin`; at least `runtime_min`. A model job without a throughput entry gets
  `runtime_default`.

Memory and time grow with the attempt, so a job that ran out of either gets more when retried; time
never beyond `runtime_max` (the partition's MaxTime: SLURM refuses a longer request outright).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from blindspot import catalogue
from blindspot.config import config_value


@dataclass(frozen=True)
class JobResources:
    gpus: int
    threads: int
    mem_mb: int
    runtime: int  # minutes

    def as_dict(self) -> dict[str, int]:
        return {"gpus": self.gpus, "threads": self.threads, "mem_mb": self.mem_mb, "runtime": self.runtime}


def weights_gb(needs: list[dict[str, Any]]) -> float:
    """The largest `weights_gb` among what a job loads (`catalogue.job_needs`): 0 where none is stated (tiny
    built models, APIs, a metric that loads no registry model and declares no `resources`)."""
    return max((need.get("weights_gb", 0.0) for need in needs), default=0.0)


def render_pixels(config: dict[str, Any]) -> int:
    """Pixels of the largest image the run renders: the size every image stage reads. (From the registry
    entries: `model_spec` would also look up each model's cached commit, for every job the DAG sizes.)"""
    sizes = [config["models"][name].get("render", {}) for name in config["image_stage"]["t2i_models"]]
    return max((size.get("height", 1024) * size.get("width", 1024) for size in sizes), default=1024 * 1024)


def images_in_flight(config: dict[str, Any], step: str, wildcards: dict[str, str]) -> int:
    """Images a job holds at once: the batch it works on and the one being decoded (or encoded)."""
    batch = catalogue.STEPS[step].image_batch
    if batch is None:
        return 0
    if callable(batch):
        return 2 * batch(config, wildcards)
    key, per_item = batch
    return 2 * config_value(config, key) * per_item


def load_seconds(config: dict[str, Any], step: str, wildcards: dict[str, str]) -> float:
    """Seconds one job of `step` spends loading what it loads, one model after another (`catalogue.job_needs`):
    each one's `weights_gb` read at `job_resources.load_gb_per_second`, then its engine started
    (`engine_start_seconds` of its backend). A job that loads nothing loads for 0 seconds."""
    settings = config["job_resources"]
    starts = settings["engine_start_seconds"]
    return sum(
        need.get("weights_gb", 0.0) / settings["load_gb_per_second"]
        + starts.get(need.get("backend"), starts["default"])
        for need in catalogue.job_needs(config, step, wildcards)
    )


def job_resources(config: dict[str, Any], step: str, wildcards: dict[str, str], attempt: int = 1) -> JobResources:
    """What one job of `step` (with these wildcards) asks for at its `attempt`."""
    settings = config["job_resources"]
    needs = catalogue.job_needs(config, step, wildcards)
    gpus = catalogue.job_gpus(config, step, wildcards)
    items = catalogue.job_items(config, step, wildcards)
    loads_something = bool(needs) or catalogue.STEPS[step].data
    threads = settings["threads_per_gpu"] * gpus if gpus else settings["cpu_threads"] if loads_something else 1
    image_mb = images_in_flight(config, step, wildcards) * render_pixels(config) * settings["bytes_per_pixel"] / 2**20
    mem_mb = settings["base_mb"] + 1024 * weights_gb(needs) + image_mb
    entries = config.get("throughput", {}).get(step, {})
    seconds = entries.get(catalogue.throughput_key(config, step, wildcards), entries.get("default"))
    if seconds is not None and items:
        runtime = settings["runtime_margin"] * (load_seconds(config, step, wildcards) + seconds * items) / 60
    else:
        runtime = settings["runtime_default"] if loads_something else settings["runtime_min"]
    runtime = attempt * max(settings["runtime_min"], math.ceil(runtime))
    if settings.get("runtime_max"):
        runtime = min(runtime, settings["runtime_max"])
    return JobResources(gpus=gpus, threads=threads, mem_mb=attempt * math.ceil(mem_mb), runtime=runtime)
