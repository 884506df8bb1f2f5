"""Which conda env (workflow/envs/NAME.yaml) a job of each step runs in: the one place the rules'
`conda:` and the env test (tests/test_rule_envs.py) read it from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# A model served by vLLM runs in vLLM's env; the other vision models in the vision env.
_BY_BACKEND = {"vllm": "llm"}


def vision_env(config: dict[str, Any], model: str) -> str:
    return _BY_BACKEND.get(config["models"][model]["backend"], "vlm")


def _metric_env(config: dict[str, Any], wildcards: dict[str, str]) -> str:
    return vision_env(config, config["evaluation"]["metrics"][wildcards["metric"]]["model"])


# Each step's env: a name, or a function of the config and the job's wildcards.
STEP_ENVS: dict[str, str | Callable[[dict[str, Any], dict[str, str]], str]] = {
    "build_model": "build",
    "make_seeds": "base",
    "generate_triplets": "llm",
    "judge_triplets": "llm",
    "accept_triplets": "base",
    "check_prompt_quality": "nlp",
    "make_table1": "base",
    "render_images": "t2i",
    "judge_images": lambda config, wildcards: vision_env(config, wildcards["vlm"]),
    "keep_consensus_pairs": "base",
    "measure_image_quality": "iqa",
    "make_table2": "base",
    "split_benchmark": "base",
    "export_dataset": "export",
    "score_metric": _metric_env,
    "score_api_metric": _metric_env,
    "make_table3": "base",
    "make_report_items": "base",
    # vLLM's env has transformers and xgrammar too: the describer and either kind of writer run there.
    "write_scene_questions": "llm",
    # It reads the release through Hugging Face datasets.
    "make_humble_questions": "export",
    "answer_humble": lambda config, wildcards: vision_env(config, wildcards["vlm"]),
    "make_humble_tables": "base",
    "train_protoscore": "vlm",
    "score_transfer": "vlm",
    "make_annotation_projects": "base",
    "validate_filter": "base",
    "human_preferences": "base",
}


def step_env(config: dict[str, Any], step: str, wildcards: dict[str, str]) -> str:
    """The env a job of `step` runs in, as its file's name under workflow/envs (e.g. "t2i")."""
    env = STEP_ENVS[step]
    return env if isinstance(env, str) else env(config, wildcards)
