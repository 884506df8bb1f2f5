"""The least GPU time a job's items could take, from what its models are and what an item puts through them
(`physical_bound:` in the config): `blindspot plan`'s `bound_gpu_hours`, and the plan's ratio to it.

An item reads tokens (its prompt, its image's tokens; for a T2I model its latent and joint text tokens at
every step and guidance pass) and writes tokens (its answer). Every token passes every parameter of the
job's models: `flops_per_parameter` operations each (2, a forward pass, unless the rule says otherwise), at
`compute_share` of the GPU's dense bf16 peak. A written token comes no sooner than the weights can be read
from GPU memory once per decoding step, shared by the `decode_batch` sequences that decode together. Left
out, so that the bound stays below what any run can reach: attention and the KV cache, VAEs, decoding
images, loading the models. A bound in GPU-seconds does not depend on how many GPUs share a model.
"""

from __future__ import annotations

import math
from typing import Any

from blindspot import catalogue

BYTES_PER_PARAMETER = {"bfloat16": 2, "float16": 2, "float32": 4}
NOTE = (
    "The bound (`bound_gpu_hours`, `physical_bound:` in the config) is the least GPU time of the items: every token "
    "an item reads and writes through every parameter of its models at `compute_share` of the GPU's peak, a written "
    "token no sooner than the weights are read once a step for `decode_batch` sequences; attention, the KV cache, "
    "VAEs and loading left out. `bound_ratio`: GPU-hours (loading included) over the bound. n/a: no tokens given."
)


def parameters(need: dict[str, Any]) -> float:
    """The parameters a token passes through in one thing a job loads (`catalogue.job_needs`): the registry's
    `params_b`, else its `weights_gb` over its dtype's bytes (0 where it states no weights)."""
    if "params_b" in need:
        return need["params_b"] * 1e9
    return need.get("weights_gb", 0.0) * 1e9 / BYTES_PER_PARAMETER[need.get("dtype", "bfloat16")]


def item_tokens(config: dict[str, Any], step: str, wildcards: dict[str, str]) -> dict[str, float] | None:
    """The tokens one item of the job reads and writes, by its `throughput:` key (its model or metric), else
    its rule's `default`; None where the config says neither."""
    entries = config.get("physical_bound", {}).get("tokens", {}).get(step, {})
    return entries.get(catalogue.throughput_key(config, step, wildcards), entries.get("default"))


def seconds_per_item(config: dict[str, Any], step: str, wildcards: dict[str, str]) -> float:
    """The least GPU-seconds one item of the job could take; 0 for a job on no GPU, NaN where the config has
    no `physical_bound` or no tokens for the job's rule and model."""
    if catalogue.job_gpus(config, step, wildcards) == 0:
        return 0.0
    bound, tokens = config.get("physical_bound"), item_tokens(config, step, wildcards)
    if bound is None or tokens is None:
        return math.nan
    needs = catalogue.job_needs(config, step, wildcards)
    gpu = bound["gpu"]
    flops = gpu["bf16_tflops"] * 1e12 * bound["compute_share"]
    per_token = bound.get("flops_per_parameter", {}).get(step, 2) * sum(map(parameters, needs)) / flops
    weight_bytes = sum(need.get("weights_gb", 0.0) for need in needs) * 1e9
    per_written = max(per_token, weight_bytes / (gpu["memory_gb_per_second"] * 1e9 * bound["decode_batch"]))
    return tokens["read"] * per_token + tokens.get("written", 0) * per_written
