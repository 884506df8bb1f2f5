"""The model registry's own facts, said once: which config key places a model in which role, which
backends may serve each role and what each backend brings (its jobs' env, its hub layout), which
registry keys decide only where or how fast a model runs, and what kind of model an entry is.

The roles' checks (`blindspot.checks`), the models a job loads (`blindspot.catalogue`), the hub
cache (`blindspot.hub.repos`) and the check of each model against its role (`blindspot.models.roles`)
all read these tables; the adapters keyed by backend (`models.textgen`, `models.vlm_scoring`)
implement the backends these tables let serve text and images.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from blindspot.config import ConfigError, as_list, config_value

# The vision env (workflow/envs/vlm.yaml): where a step whose env follows its model runs, unless the model's
# backend names another; also a metric's jobs when it loads no registry model.
MODEL_ENV = "vlm"


@dataclass(frozen=True)
class Backend:
    """What a registry entry's `backend` brings with it."""

    serves: tuple[str, ...]  # the kinds of role it can fill (`Role.kind`)
    env: str = MODEL_ENV  # workflow/envs/<env>.yaml, for the steps whose env follows their model
    layout: str | None = "transformers"  # how the hub cache finds its folders; None: not from the hub


BACKENDS = {
    "vllm": Backend(("text", "images", "answers"), env="llm"),
    "transformers": Backend(("text", "images", "answers", "captions", "nli", "lora")),
    "sentence_transformers": Backend(("embeddings",), layout="sentence_transformers"),
    "diffusers": Backend(("t2i",), layout="diffusers"),
    "pyiqa": Backend(("iqa",), layout=None),  # pyiqa never downloads (`protobias.iqa.weights_file`)
    "open_clip": Backend(("metric",)),
    # An endpoint: an API judge's metric, HumbleBench's answers (`models.api.vlm`), in the vision env.
    "openai_api": Backend(("metric", "answers"), layout=None),
}


@dataclass(frozen=True)
class Role:
    """A config key that names a model (or a list of models) in one role."""

    key: str  # dotted, e.g. "prompt_stage.generators"
    kind: str  # what the model does there; the backends that serve it may fill the role
    # What the model is handed or asked to write, checked against its config.json (`models.roles`).
    needs: str | None = None

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(name for name, backend in BACKENDS.items() if self.kind in backend.serves)


ROLES = (
    Role("prompt_stage.generators", "text", needs="text"),
    Role("prompt_stage.judges", "text", needs="text"),
    Role("prompt_stage.embedding_model", "embeddings"),
    Role("prompt_stage.nli_model", "nli"),
    Role("image_stage.t2i_models", "t2i"),
    Role("image_stage.vlms", "images", needs="images"),
    Role("image_stage.iqa_metrics", "iqa"),
    # answering multiple-choice questions about an image: local weights or an endpoint (`models.api.vlm.ANSWERERS`)
    Role("humblebench.vlms", "answers", needs="images"),
    Role("protoscore.model", "lora", needs="images"),  # trained with peft's LoRA on the transformers model
    # HumbleBench's scene-graph questions, when the config writes them
    Role("humblebench.scene_graphs.describer", "captions", needs="images"),
    Role("humblebench.scene_graphs.writer", "text", needs="text"),
)


# The row groups of HumbleBench's Tables 4 and 6, in the paper's order: a registry entry's `group` -> heading.
MODEL_GROUPS = {
    "general": "General-purpose models",
    "reasoning": "Reasoning models",
    "proprietary": "Proprietary models",
}


def placed_models(config: Mapping[str, Any]) -> Iterator[tuple[Role, str]]:
    """(role, registry name) of every model the config places in a role, in the roles' order."""
    for role in ROLES:
        value = config_value(config, role.key)
        if value is not None:
            yield from ((role, name) for name in as_list(value))


def metric_models(entry: Mapping[str, Any]) -> list[str]:
    """The registry models a metric loads: its own (none for a plug-in that loads no registry model),
    then the ones its plug-in takes as arguments (`models`, e.g. AlignScore's captioner)."""
    return [*([entry["model"]] if "model" in entry else []), *entry.get("models", {}).values()]


def is_api_model(entry: Mapping[str, Any]) -> bool:
    """Whether a registry entry is an OpenAI-compatible endpoint, not weights."""
    return entry["backend"] == "openai_api"


def is_api_metric(config: Mapping[str, Any], metric: str) -> bool:
    """Whether a metric is served over the internet (its jobs run where the network is)."""
    model = config["evaluation"]["metrics"][metric].get("model")
    return model is not None and is_api_model(config["models"][model])


def api_vlms(config: Mapping[str, Any]) -> list[str]:
    """HumbleBench's VLMs served by an endpoint: their answer jobs run where the network is."""
    return [name for name in config["humblebench"]["vlms"] if is_api_model(config["models"][name])]


def built_model_dir(config: Mapping[str, Any], name: str) -> Path:
    """Where a model built from its recipe (`build:`) lives."""
    return Path(config["resources_dir"]) / "models" / name


# Registry keys that decide where or how fast a model runs, who may call it or what it costs, not what it
# outputs: results made under other values are reused (the score cache, the journals of a killed job).
RUN_ONLY_KEYS = frozenset(
    {
        "gpus",
        "weights_gb",
        "gated",
        "licence",
        "client",
        "api_key_env",
        "endpoint",
        "max_model_len",
        "allow_cpu",
        "prices",
        "group",
    }
)
# vLLM engine arguments of memory and scheduling, the usual changes after an out-of-memory error; any
# other (quantization, kv_cache_dtype, mm_processor_kwargs) may change what the model outputs.
RUN_ONLY_ENGINE_ARGS = frozenset(
    {
        "gpu_memory_utilization",
        "kv_cache_memory_bytes",
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_model_len",
        "swap_space",
        "cpu_offload_gb",
        "enforce_eager",
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "block_size",
        "limit_mm_per_prompt",
        "mm_processor_cache_gb",
        "num_gpu_blocks_override",
        "cudagraph_capture_sizes",
        "max_cudagraph_capture_size",
        "max_parallel_loading_workers",
        "disable_log_stats",
        "disable_custom_all_reduce",
        "distributed_executor_backend",
        "download_dir",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "compilation_config",
        "max_seq_len_to_capture",
        "disable_log_requests",
    }
)


def output_settings(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A registry entry (or a ModelSpec's fields) without what decides only where or how fast the model
    runs (`RUN_ONLY_KEYS`, `RUN_ONLY_ENGINE_ARGS`): what keys the results it made."""
    kept = {key: value for key, value in entry.items() if key not in RUN_ONLY_KEYS}
    engine = {key: value for key, value in kept.pop("engine_args", {}).items() if key not in RUN_ONLY_ENGINE_ARGS}
    return kept | ({"engine_args": engine} if engine else {})


# HumbleBench: how each VLM answers and which settings (`humblebench.protocols` says why).


@dataclass(frozen=True)
class Decoding:
    """Greedy (`temperature` 0), or sampled at `temperature` with `top_p`/`top_k` where given; `checkpoint`
    until the job reads the checkpoint's generation config (`resolved`)."""

    mode: str = "greedy"  # greedy | checkpoint | sampled
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None

    @property
    def sampled(self) -> bool:
        return self.mode == "sampled"

    def resolved(self, generation_config: Any) -> Decoding:
        """The checkpoint's decoding, from its transformers `GenerationConfig`, as `generate` runs it when the
        official wrapper passes no decoding: sampled only where it sets `do_sample`; any other decoding as it is."""
        if self.mode != "checkpoint":
            return self
        if not getattr(generation_config, "do_sample", False):
            return Decoding()
        return Decoding(
            "sampled",
            float(getattr(generation_config, "temperature", None) or 1.0),
            getattr(generation_config, "top_p", None),
            getattr(generation_config, "top_k", None),
        )


@dataclass(frozen=True)
class AnswerProtocol:
    """One VLM's HumbleBench protocol as its `answer_humble` jobs take it (`humblebench.protocols`)."""

    name: str  # official | uniform: which ran, in every answer row
    prompt: str  # the prompt template's file
    system: str  # the system message ("": the template's, or none)
    decoding: Decoding
    max_tokens: int
    answer_after: tuple[str, ...] = ()

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> AnswerProtocol:
        """The protocol from its rule params (`asdict` of one)."""
        return cls(
            params["name"],
            params["prompt"],
            params["system"],
            Decoding(**params["decoding"]),
            int(params["max_tokens"]),
            tuple(params["answer_after"]),
        )

    def params(self) -> dict[str, Any]:
        return asdict(self)


def _decoding(value: Any) -> Decoding:
    """An entry's `decoding` (its form checked by the config's schema)."""
    if isinstance(value, str):
        return Decoding(value)
    return Decoding("sampled", float(value.get("temperature", 1.0)), value.get("top_p"), value.get("top_k"))


def answer_protocol(config: Mapping[str, Any], vlm: str) -> AnswerProtocol:
    """The protocol `vlm` answers HumbleBench under: `humblebench.protocol`'s choice, with the official one
    from its entry's `humble_protocol` (`humblebench.protocols`)."""
    humble = config["humblebench"]
    chosen = humble.get("protocol", "official")
    entry = config["models"][vlm]
    own = entry.get("humble_protocol") or {}
    max_tokens = int(own.get("max_tokens", humble["max_new_tokens"]))
    if chosen == "uniform":
        return AnswerProtocol(chosen, humble["prompt"], "", Decoding(), max_tokens)
    if "decoding" in own and entry["backend"] == "openai_api":
        raise ConfigError(f"models.{vlm}.humble_protocol.decoding: an API model decodes as its `request` says")
    decoding = _decoding(own["decoding"]) if "decoding" in own else Decoding()
    answer_after = tuple(own.get("answer_after", ()))
    prompt, system = own.get("prompt", humble["prompt"]), own.get("system", "")
    return AnswerProtocol(chosen, prompt, system, decoding, max_tokens, answer_after)


def vlm_settings(config: Mapping[str, Any], vlm: str) -> list[str]:
    """The settings `vlm` answers, in the config's order: its entry's `humble_settings`, else its group's
    (`humblebench.group_settings`), else every setting; those the config has not, left out."""
    humble, entry = config["humblebench"], config["models"][vlm]
    listed = entry.get("humble_settings")
    if listed is None:
        listed = (humble.get("group_settings") or {}).get(entry.get("group"))
    if listed is None:
        return list(humble["settings"])
    return [setting for setting in humble["settings"] if setting in listed]
