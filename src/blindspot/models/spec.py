"""A registry entry resolved for a job (`ModelSpec`): where its weights are read from, at which
revision, on which device; and a built model's recipe with the registry names in it resolved."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from blindspot.config import ConfigError
from blindspot.hub.cache import cached_commit
from blindspot.hub.repos import model_source
from blindspot.models.device import GPUUnavailable, gpu_shortage, visible_gpus
from blindspot.registry import built_model_dir, output_settings


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry. `path` is where the weights are read from (hub id or local dir)."""

    name: str
    backend: str
    gpus: int
    dtype: str
    path: str
    revision: str | None = None
    built: bool = False
    trust_remote_code: bool = False
    max_model_len: int | None = None
    tokenizer_mode: str | None = None
    generation: dict[str, Any] = field(default_factory=dict)
    engine_args: dict[str, Any] = field(default_factory=dict)
    # A LoRA adapter of the checkpoint that vLLM applies to every request (Phi-4-multimodal's vision
    # adapter): its `name`, its folder `path` in the model's folder, and the engine's `max_rank`.
    lora: dict[str, Any] = field(default_factory=dict)
    pipeline: str | None = None
    render: dict[str, Any] = field(default_factory=dict)
    licence: str | None = None
    metric: str | None = None
    build: dict[str, Any] = field(default_factory=dict)
    # An OpenAI-compatible endpoint instead of weights (backend openai_api).
    endpoint: str | None = None
    api_key_env: str | None = None  # the NAME of the variable that holds the key, never the key
    request: dict[str, Any] = field(default_factory=dict)
    client: dict[str, Any] = field(default_factory=dict)
    allow_cpu: bool = False  # the config's `allow_cpu`: a model that asks for GPUs may run on the CPU

    @property
    def device(self) -> str:
        """Where the model runs: "cuda" when it asks for GPUs and the job sees as many, the CPU when it
        asks for none. A job that sees fewer stops (GPUUnavailable), unless the config allows the CPU."""
        if self.gpus == 0:
            return "cpu"
        seen = visible_gpus()
        if seen >= self.gpus:
            return "cuda"
        if self.allow_cpu:
            return "cpu"
        raise GPUUnavailable(gpu_shortage(self.name, self.gpus, seen))

    @property
    def device_map(self) -> str:
        """transformers' `device_map`: weights load straight onto the device, spread over the GPUs
        ("auto") when the model asks for several."""
        device = self.device
        return "auto" if device == "cuda" and self.gpus > 1 else device

    @property
    def outputs(self) -> dict[str, Any]:
        """What decides the model's outputs (`output_settings`), for the keys of its results: a job
        resumed after a change of memory or GPUs goes on from its journal."""
        return output_settings(asdict(self))

    @property
    def files(self) -> dict[str, Any]:
        """What transformers' `from_pretrained` takes to find the model's files: the revision, and whether
        its remote code may run."""
        return {"revision": self.revision, "trust_remote_code": self.trust_remote_code}

    def pretrained(self, auto_class: Any) -> Any:
        """The model through a transformers auto class, its weights loaded straight onto its device in
        its dtype, in eval mode; a job without the GPUs its model asks for stops before reading them."""
        import torch

        device_map = self.device_map
        model = auto_class.from_pretrained(
            self.path, **self.files, dtype=getattr(torch, self.dtype), device_map=device_map
        )
        return model.eval()

    @property
    def model_id(self) -> str:
        """What provenance records: the hub id, or the registry name for a built model."""
        return f"built:{self.name}" if self.built else self.path


def model_spec(config: dict[str, Any], name: str) -> ModelSpec:
    """A registry entry resolved for a job. A hub model's revision is the commit the hub cache holds for
    it (`fetch-models` put it there), so rows, journals and caches name the weights they came from, and
    weights fetched anew re-run the jobs that read them."""
    try:
        entry = config["models"][name]
    except KeyError:
        raise ConfigError(f"model '{name}' is not in the registry") from None
    built = "build" in entry
    path = built_model_dir(config, name) if built else entry["id"]
    revision = entry.get("revision")
    if model_source(entry) == "hub":
        revision = cached_commit(entry["id"], revision) or revision
    return ModelSpec(
        name=name,
        backend=entry["backend"],
        gpus=entry["gpus"],
        dtype=entry.get("dtype", "none"),
        path=str(path),
        revision=revision,
        built=built,
        trust_remote_code=entry.get("trust_remote_code", False),
        max_model_len=entry.get("max_model_len"),
        tokenizer_mode=entry.get("tokenizer_mode"),
        generation=entry.get("generation", {}),
        engine_args=entry.get("engine_args", {}),
        lora=entry.get("lora", {}),
        pipeline=entry.get("pipeline"),
        render=entry.get("render", {}),
        licence=entry.get("licence"),
        metric=entry.get("metric"),
        endpoint=entry.get("endpoint"),
        api_key_env=entry.get("api_key_env"),
        request=entry.get("request", {}),
        client=entry.get("client", {}),
        build=entry.get("build", {}),
        allow_cpu=config.get("allow_cpu", False),
    )


def resolved_recipe(config: dict[str, Any], name: str) -> dict[str, Any]:
    """A model's build recipe with `tokenizer_from` (a registry name) turned into its directory."""
    recipe = dict(config["models"][name]["build"])
    if "tokenizer_from" in recipe:
        recipe["tokenizer_from"] = str(model_spec(config, recipe["tokenizer_from"]).path)
    return recipe


def build_inputs(config: dict[str, Any], name: str) -> list[str]:
    """Files and built models that a model's recipe reads: the inputs of its build job."""
    recipe = resolved_recipe(config, name)
    return [recipe[key] for key in ("archive", "tokenizer_from") if key in recipe]
