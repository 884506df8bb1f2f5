"""Text generation (issue 19): the vLLM backend against the transformers backend, both as the project
runs them (`load_text_generator`, then `generate_json` under the triplet schema), on SmolLM2-135M with
greedy decoding, for the tiny run's objects and animals seeds rendered with the generator prompt.

Both arms run in .venv-vllm (same torch and transformers), each in its own process, so neither engine
holds cores or memory while the other is timed, and each on the thread count a workflow job gets
(`job_resources.cpu_threads`; vLLM's CPU worker binds one core per rank in any case). Agreement: the
greedy texts are equal, prompt by prompt; the detail also counts prompts whose texts hold the same JSON
values, which tells a whitespace difference between the two grammars from a different answer.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from timing import Row, run_in_env
from tiny_preset import REPO, build_models

from blindspot.models.spec import model_spec
from blindspot.prompts import PromptTemplate
from blindspot.protobias.taxonomy import sample_seeds
from blindspot.protobias.triplets import TRIPLET_JSON_SCHEMA

MODEL = "smollm2-135m"
DOMAINS = ("objects", "animals")
ARMS = Path(__file__).with_name("vllm_arms.py")
# vLLM's CPU backend otherwise sizes its KV cache as a share of the machine's memory; 1 GiB holds about
# 23,000 tokens of SmolLM2 in float32, room for all 16 prompts and their answers at once.
VLLM_ENGINE = {"max_model_len": 2048, "engine_args": {"kv_cache_memory_bytes": 1 << 30}}


def conversations(config: dict[str, Any]) -> list[list[dict[str, str]]]:
    """The generator prompt for each seed of the tiny run's first shard in each domain."""
    template = PromptTemplate.load(REPO / config["prompt_stage"]["generate_template"])
    rows = []
    for domain in DOMAINS:
        settings = config["domains"][domain]
        seeds = sample_seeds(REPO / settings["taxonomy"], domain, settings["n_seeds"], config["seed"])
        rows += [template.render(seed=seed) for seed in seeds.to_dict("records")]
    return rows


def first_divergence(peer: str, ours: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(peer, ours, strict=False)) if a != b), min(len(peer), len(ours)))
    return f"at character {at}: transformers {peer[at : at + 40]!r}, vLLM {ours[at : at + 40]!r}"


def parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def compare(config: dict[str, Any], repeats: int) -> list[Row]:
    build_models(config, {MODEL})
    prompts = conversations(config)
    arms = {}
    with tempfile.TemporaryDirectory() as scratch:
        for backend in ("transformers", "vllm"):
            arm_config = copy.deepcopy(config)
            entry = arm_config["models"][MODEL]
            entry["backend"] = backend
            if backend == "vllm":
                entry |= VLLM_ENGINE
            job = {
                "arm": "textgen",
                "model": dataclasses.asdict(model_spec(arm_config, MODEL)),
                "seed": config["seed"],
                "batch_size": config["prompt_stage"]["batch_size"],
                "conversations": prompts,
                "json_schema": TRIPLET_JSON_SCHEMA,
                "repeats": repeats,
                "threads": config["job_resources"]["cpu_threads"],
            }
            path = Path(scratch) / f"{backend}.json"
            path.write_text(json.dumps(job))
            arms[backend] = run_in_env(".venv-vllm/bin/python", ARMS, str(path))
    peer, ours = arms["transformers"], arms["vllm"]
    pairs = list(zip(peer["outputs"], ours["outputs"], strict=True))
    differ = [i for i, (a, b) in enumerate(pairs) if a != b]
    same_values = sum(a == b or (parsed(a) is not None and parsed(a) == parsed(b)) for a, b in pairs)
    generation = model_spec(config, MODEL).generation
    detail = (
        f"greedy texts equal for {len(pairs) - len(differ)}/{len(pairs)} prompts, the same JSON values for "
        f"{same_values}/{len(pairs)} ({', '.join(DOMAINS)} seeds, triplet JSON schema, max_tokens "
        f"{generation['max_tokens']}, transformers batch size {config['prompt_stage']['batch_size']}, float32, "
        f"{config['job_resources']['cpu_threads']} thread of {os.cpu_count()} cores)"
    )
    if differ:
        detail += f"; first differing prompt {differ[0]} " + first_divergence(*pairs[differ[0]])
    detail += f"; load s: transformers {peer['load_seconds']:.1f}, vLLM {ours['load_seconds']:.1f}"
    return [
        Row(
            what=f"text generation ({len(pairs)} prompts)",
            peer="transformers backend (generate)",
            peer_seconds=peer["seconds"],
            ours_seconds=ours["seconds"],
            agree=not differ,
            detail=detail,
        )
    ]
