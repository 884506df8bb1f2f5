"""The run configuration: validation against the JSON schema, the model registry, shards."""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from blindspot.prompts import PromptTemplate

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "workflow" / "schemas"
SCHEMA_PATH = SCHEMA_DIR / "config.schema.yaml"
# (stage, role) -> the backends a model in that role may have.
MODEL_ROLES = {
    ("prompt_stage", "generators"): ("vllm", "transformers"),
    ("prompt_stage", "judges"): ("vllm", "transformers"),
    ("prompt_stage", "embedding_model"): ("sentence_transformers",),
    ("prompt_stage", "nli_model"): ("transformers",),
    ("image_stage", "t2i_models"): ("diffusers",),
    ("image_stage", "vlms"): ("vllm", "transformers"),
    ("image_stage", "iqa_metrics"): ("pyiqa",),
    ("humblebench", "vlms"): ("vllm", "transformers"),
    ("protoscore", "model"): ("transformers",),
}
# HumbleBench's scene-graph question writing: role -> the backends its model may have.
SCENE_GRAPH_ROLES = {"describer": ("transformers",), "writer": ("vllm", "transformers")}


# Keys whose value is a file the run reads ("*": every name at that level), relative to where the run
# starts; a missing one stops the config check rather than the job that first opens it.
CONFIG_FILES = (
    "domains.*.taxonomy",
    "prompt_stage.generate_template",
    "prompt_stage.judge_template",
    "image_stage.judge_template",
    "evaluation.metrics.*.args.template",
    "humblebench.scene_graphs.file",
    "humblebench.scene_graphs.template",
    "humblebench.scene_graphs.verification",
    "humblebench.settings.*.template",
    "humblebench.human_answers",
    "evaluation.human_choices",
    "annotation.image_score_labels",
    "annotation.pairwise_labels",
    "protoscore.transfer",
)
# Keys whose value is a dataset: a local file or folder, or a hub dataset id (`models.hub.is_hub_dataset`:
# org/name, no table suffix). One that is neither (data/x.jsonl, ./release, a plain name) is a local path
# that is not there.
CONFIG_DATASETS = ("humblebench.release", "dataset.path")
# The template whose `rubric` people are shown too (the annotation projects' image_score).
RUBRIC_TEMPLATE = "image_stage.judge_template"


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the offending key."""


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


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties":
        # The offending key is not in the path; jsonschema only names it in the message.
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        parts.extend(extra[:1])
    elif error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        parts.extend(missing[:1])
    return ".".join(parts) or "<top level>"


# "integer" is a Python int: jsonschema also takes 8.0 (and the steps then fail on it), never a bool.
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, instance: isinstance(instance, int) and not isinstance(instance, bool)
    ),
)
# A number in exponent notation. PyYAML reads a float only with a dot and a signed exponent (1.0e-3,
# 1.0e+3): 1e-3 and 1.0e3 are text.
_EXPONENT = re.compile(r"([-+]?)([0-9]*)(?:\.([0-9]*))?([eE])([-+]?)([0-9]+)")


def _number_as_text(error: jsonschema.ValidationError) -> str:
    """For a number YAML read as text (1e-3), how to write it so YAML reads a number; else empty."""
    value = error.instance
    if error.validator != "type" or not isinstance(value, str):
        return ""
    wanted = [error.validator_value] if isinstance(error.validator_value, str) else list(error.validator_value)
    if not {"number", "integer"} & set(wanted):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    exponent = _EXPONENT.fullmatch(value.strip())
    if "number" not in wanted:  # an integer only
        if not number.is_integer():
            return ""
        written = str(int(number)) if exponent else f"{int(number)} without quotes"
    elif exponent:
        sign, whole, fraction, e, exponent_sign, digits = exponent.groups()
        written = f"{sign}{whole or '0'}.{fraction or '0'}{e}{exponent_sign or '+'}{digits}"
    elif math.isnan(number):
        written = ".nan"
    elif math.isinf(number):
        written = "-.inf" if number < 0 else ".inf"
    else:
        written = f"{value.strip()} without quotes"
    return f"; YAML reads {value} as text: write {written}"


def check_schema(instance: Any, schema_path: Path, what: str) -> None:
    """Raise ConfigError naming the key of the shallowest schema violation in `instance`."""
    schema = yaml.safe_load(schema_path.read_text())
    errors = list(_Validator(schema).iter_errors(instance))
    if errors:
        error = min(errors, key=lambda e: (len(list(e.absolute_path)), list(map(str, e.absolute_path))))
        raise ConfigError(f"{what} key '{_key_path(error)}': {error.message}{_number_as_text(error)}")


def named_values(config: Any, pattern: str, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every key of the config that `pattern` ("a.*.b") names and that is set."""
    head, _, rest = pattern.partition(".")
    if not isinstance(config, dict):
        return
    names = list(config) if head == "*" else [head] if config.get(head) is not None else []
    for name in names:
        key = f"{prefix}{name}"
        if rest:
            yield from named_values(config[name], rest, f"{key}.")
        else:
            yield key, config[name]


def check_files(config: dict[str, Any]) -> None:
    """Raise ConfigError naming the key of the first file (or local dataset) the config names that is not there."""
    for pattern in CONFIG_FILES:
        for key, value in named_values(config, pattern):
            if not Path(value).is_file():
                where = "is not a file" if Path(value).exists() else "does not exist"
                raise ConfigError(f"config key '{key}': {value} {where} (relative paths start at {Path.cwd()})")
            if key.endswith("template"):  # read when the workflow is planned, not after a job's model loads
                try:
                    template = PromptTemplate.load(value)
                except ValueError as error:
                    raise ConfigError(f"config key '{key}': {error}") from None
                if key == RUBRIC_TEMPLATE and ("rubric" not in template.system + template.user or not template.rubric):
                    raise ConfigError(
                        f"config key '{key}': {value} needs a `rubric` that its messages use ({{{{ rubric }}}}): the "
                        "filter evaluators are shown it, so that people and the VLMs score on one rubric"
                    )
    from blindspot.models.hub import is_hub_dataset

    for pattern in CONFIG_DATASETS:
        for key, value in named_values(config, pattern):
            if isinstance(value, str) and not Path(value).exists() and not is_hub_dataset(value):
                raise ConfigError(f"config key '{key}': {value} does not exist (relative paths start at {Path.cwd()})")


def check_taxonomies(config: dict[str, Any]) -> None:
    """Load each domain's taxonomy (one line naming its file and key when it is broken) and check that it
    enumerates the seeds the domain asks for; a config that scores a released dataset (`dataset:`)
    samples none, and its domains' taxonomies are not read."""
    from blindspot.protobias.taxonomy import check_n_seeds, load_taxonomy

    if config.get("dataset"):
        return
    for domain, entry in config["domains"].items():
        check_n_seeds(load_taxonomy(entry["taxonomy"], domain), entry["taxonomy"], domain, entry["n_seeds"])


def validate_config(config: dict[str, Any]) -> None:
    """Raise ConfigError naming the first bad key; check names that refer to the registry and files."""
    check_schema(config, SCHEMA_PATH, "config")
    check_files(config)
    check_taxonomies(config)
    models = config["models"]
    roles = [(f"{stage}.{role}", config[stage][role], backends) for (stage, role), backends in MODEL_ROLES.items()]
    scene_graphs = config["humblebench"].get("scene_graphs") or {}
    roles += [(f"humblebench.scene_graphs.{role}", scene_graphs[role], backends)
              for role, backends in SCENE_GRAPH_ROLES.items() if role in scene_graphs]  # fmt: skip
    for key, names, backends in roles:
        for name in [names] if isinstance(names, str) else names:
            if name not in models:
                raise ConfigError(
                    f"config key '{key}': model '{name}' is not in the registry (models: {', '.join(sorted(models))})"
                )
            if models[name]["backend"] not in backends:
                raise ConfigError(
                    f"config key 'models.{name}.backend': '{models[name]['backend']}' cannot "
                    f"serve as {key.rsplit('.', 1)[1]} (expected one of {', '.join(backends)})"
                )
    if config["annotation"].get("pairwise_labels") and config["evaluation"].get("human_choices"):
        raise ConfigError(
            "config keys 'annotation.pairwise_labels' and 'evaluation.human_choices' both give Table 3's human "
            "majority: keep one"
        )
    for name, entry in models.items():
        # A job's host memory is sized by its weights (blindspot.resources); built models are tiny.
        if "id" in entry and not is_api_model(entry) and "weights_gb" not in entry:
            raise ConfigError(
                f"config key 'models.{name}.weights_gb': missing; the size of the weight files its jobs read "
                "(GB) sizes their memory on a cluster"
            )
        lender = entry.get("build", {}).get("tokenizer_from")
        if lender is not None and (not isinstance(lender, str) or lender not in models):
            raise ConfigError(
                f"config key 'models.{name}.build.tokenizer_from': model '{lender}' is not in the registry "
                f"(models: {', '.join(sorted(models))})"
            )
    humble = config["humblebench"]
    for use, setting in humble["tables"].items():
        if setting not in humble["settings"]:
            raise ConfigError(
                f"config key 'humblebench.tables.{use}': '{setting}' is not one of the settings "
                f"({', '.join(humble['settings'])})"
            )
    from blindspot.humblebench.questions import KIND_FIELDS

    for name, kind in ((humble.get("from_benchmark") or {}).get("kinds") or {}).items():
        try:
            kind["text"].format(**dict.fromkeys(KIND_FIELDS, ""))
        except (KeyError, IndexError, ValueError) as error:  # a field it does not have, {0}, a lone brace
            raise ConfigError(
                f"config key 'humblebench.from_benchmark.kinds.{name}.text': cannot fill in {error} "
                f"(it may use {', '.join('{' + field + '}' for field in KIND_FIELDS)})"
            ) from None
    # The steps timed per item are the catalogue's, which itself reads the config's models.
    from blindspot.catalogue import check_throughput

    check_throughput(config)
    # With `dataset:` nothing is built: nothing may ask for what only building gives.
    from blindspot.protobias.released import check_released_config

    check_released_config(config)
    evaluation = config["evaluation"]
    from blindspot.metrics import PluginError, check_plugin, plugin_arguments

    for name, metric in evaluation["metrics"].items():
        try:
            check_plugin(metric["plugin"])
        except PluginError as error:
            raise ConfigError(f"config key 'evaluation.metrics.{name}.plugin': {error}") from None
        takes = plugin_arguments(metric["plugin"])
        given = [f"{part}.{arg}" for part in ("args", "models") for arg in metric.get(part, {})]
        unknown = [key for key in given if takes is not None and key.split(".", 1)[1] not in takes]
        if unknown:  # else the job dies on a TypeError after loading its model
            raise ConfigError(
                f"config key 'evaluation.metrics.{name}.{unknown[0]}': {metric['plugin']} takes no argument "
                f"'{unknown[0].split('.', 1)[1]}' (it takes {', '.join(takes) or 'none'})"
            )
        named = {"model": metric["model"]} | {f"models.{arg}": m for arg, m in metric.get("models", {}).items()}
        for key, model in named.items():
            if model not in models:
                raise ConfigError(
                    f"config key 'evaluation.metrics.{name}.{key}': model '{model}' is not in the registry "
                    f"(models: {', '.join(sorted(models))})"
                )
        # Its jobs run where its own model does: an API model's on the submit host (the network, no GPU),
        # another's on compute nodes (GPUs, no network); a helper of the other kind could not run there.
        served = {key: is_api_model(models[model]) for key, model in named.items()}
        mixed = [key for key, is_api in served.items() if is_api != served["model"]]
        if mixed:
            kind, where = (
                ("no", "the submit host, without GPUs")
                if served["model"]
                else ("an", "compute nodes, without the network")
            )
            raise ConfigError(
                f"config key 'evaluation.metrics.{name}.{mixed[0]}': '{named[mixed[0]]}' is {kind} "
                f"API model, but the metric's jobs run on {where}, where its own model '{metric['model']}' does"
            )
        if metric["family"] not in evaluation["families"]:
            raise ConfigError(
                f"config key 'evaluation.metrics.{name}.family': '{metric['family']}' is not one of the families "
                f"({', '.join(evaluation['families'])})"
            )
        # the trained scorer's adapters fit only the model they were trained on
        if metric["plugin"] == "protoscore" and metric["model"] != config["protoscore"]["model"]:
            raise ConfigError(
                f"config key 'evaluation.metrics.{name}.model': '{metric['model']}' is not the model ProtoScore is "
                f"trained on (protoscore.model: '{config['protoscore']['model']}')"
            )


def _duplicate_key(root: yaml.Node) -> tuple[str, int, int] | None:
    """The first key given twice in one mapping of a YAML document (PyYAML keeps the last without a
    word): its dotted path and both lines. A merge (`<<: *anchor`) may override, so it is no duplicate."""
    pending: list[tuple[yaml.Node, str]] = [(root, "")]
    seen_nodes: set[int] = set()
    while pending:
        node, prefix = pending.pop()
        if id(node) in seen_nodes:  # an alias points back at a node already walked
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            pending += [(item, f"{prefix}[{index}]") for index, item in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key, value in node.value:
                name = f"{prefix}.{key.value}" if prefix else str(key.value)
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if name in lines:
                        return name, lines[name], key.start_mark.line + 1
                    lines[name] = key.start_mark.line + 1
                pending.append((value, name))
    return None


def read_yaml(path: str | Path, what: str = "config") -> Any:
    """A YAML file's data; a file that is missing, unreadable, not YAML or that gives a key twice raises
    ConfigError with one line naming the file and the line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{what} file {path} cannot be read: {error}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        duplicate = _duplicate_key(root) if root is not None else None
        if duplicate:
            key, first, again = duplicate
            raise ConfigError(f"{what} file {path} line {again}: key '{key}' is given twice (first on line {first})")
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(part) for part in (error.context, error.problem) if part)
        raise ConfigError(f"{what} file {path}{where}: not valid YAML ({problem})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{what} file {path}: not valid YAML ({' '.join(str(error).split())})") from None


def check_config_files(paths: Iterable[str | Path]) -> None:
    """Re-read the config files a Snakemake run loaded (`workflow.configfiles`): Snakemake's own loader
    keeps the last of a duplicated key without a word."""
    for path in paths:
        read_yaml(path)


def load_config(path: str | Path) -> dict[str, Any]:
    config = read_yaml(path)
    validate_config(config)
    return config


# Registry keys that decide where or how fast a model runs, or who may call it, not what it outputs:
# results made under other values are reused (the score cache, the journals of a killed job).
RUN_ONLY_KEYS = frozenset({"gpus", "weights_gb", "gated", "licence", "client", "api_key_env", "endpoint",
                           "max_model_len", "allow_cpu"})  # fmt: skip
# vLLM engine arguments of memory and scheduling, the usual changes after an out-of-memory error; any
# other (quantization, kv_cache_dtype, mm_processor_kwargs) may change what the model outputs.
RUN_ONLY_ENGINE_ARGS = frozenset({
    "gpu_memory_utilization", "kv_cache_memory_bytes", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
    "swap_space", "cpu_offload_gb", "enforce_eager", "enable_prefix_caching", "enable_chunked_prefill", "block_size",
    "limit_mm_per_prompt", "mm_processor_cache_gb", "num_gpu_blocks_override", "cudagraph_capture_sizes",
    "max_cudagraph_capture_size", "max_parallel_loading_workers", "disable_log_stats", "disable_custom_all_reduce",
    "distributed_executor_backend", "download_dir", "tensor_parallel_size", "pipeline_parallel_size",
    "data_parallel_size", "compilation_config", "max_seq_len_to_capture", "disable_log_requests",
})  # fmt: skip


def output_settings(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A registry entry (or a ModelSpec's fields) without what decides only where or how fast the model
    runs (`RUN_ONLY_KEYS`, `RUN_ONLY_ENGINE_ARGS`): what keys the results it made."""
    kept = {key: value for key, value in entry.items() if key not in RUN_ONLY_KEYS}
    engine = {key: value for key, value in kept.pop("engine_args", {}).items() if key not in RUN_ONLY_ENGINE_ARGS}
    return kept | ({"engine_args": engine} if engine else {})


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
        raise GPUUnavailable(gpu_shortage(self, seen))

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
    def model_id(self) -> str:
        """What provenance records: the hub id, or the registry name for a built model."""
        return f"built:{self.name}" if self.built else self.path


def visible_gpus() -> int:
    """CUDA devices this process can use, counted through NVML (torch falls back to the CUDA runtime only
    where NVML does not answer). `torch.cuda.is_available()` asks the runtime, which initialises CUDA in
    this process, and a vLLM engine process forked after that cannot use CUDA ("CUDA error:
    initialization error"); vLLM counts the same way. A driver too old for torch's CUDA build is counted
    too: the job then fails at its first CUDA call, and `blindspot doctor`'s canary names the driver."""
    import torch

    return torch.cuda.device_count()


def nvidia_driver() -> str:
    """The NVIDIA driver's version as nvidia-smi reports it, or why there is none."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "no driver"
    lines = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode != 0:
        return f"no driver (nvidia-smi: {lines[0] if lines else f'exit {done.returncode}'})"
    return f"driver {lines[0]}" if lines else "no driver"


def gpu_shortage(spec: ModelSpec, seen: int) -> str:
    """One line: the rule, the model, the GPUs it asked for and those the job sees, and the versions."""
    import torch

    step = _RUNNING_STEP.get()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (
        f"rule {step or '(none)'}: model '{spec.name}' asks for {spec.gpus} GPU(s), the job sees {seen} "
        f"(CUDA_VISIBLE_DEVICES={'unset' if visible is None else repr(visible)}; torch {torch.__version__} "
        f"built for CUDA {torch.version.cuda or 'none'}, {nvidia_driver()}); run it where its GPUs are, or set "
        "allow_cpu: true in the config to run GPU models on the CPU"
    )


def model_spec(config: dict[str, Any], name: str) -> ModelSpec:
    """A registry entry resolved for a job. A hub model's revision is the commit the hub cache holds for
    it (`fetch-models` put it there), so rows, journals and caches name the weights they came from, and
    weights fetched anew re-run the jobs that read them."""
    from blindspot.models.hub import cached_commit, model_source

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


def is_api_metric(config: dict[str, Any], metric: str) -> bool:
    """Whether a metric is served over the internet (its jobs run where the network is)."""
    return is_api_model(config["models"][config["evaluation"]["metrics"][metric]["model"]])


def is_api_model(entry: Mapping[str, Any]) -> bool:
    """Whether a registry entry is an OpenAI-compatible endpoint, not weights."""
    return entry["backend"] == "openai_api"


def metric_models(entry: dict[str, Any]) -> list[str]:
    """The registry models a metric loads: its own, then the ones its plug-in takes as arguments
    (`models`, e.g. AlignScore's captioner)."""
    return [entry["model"], *entry.get("models", {}).values()]


def built_model_dir(config: dict[str, Any], name: str) -> Path:
    return Path(config["resources_dir"]) / "models" / name


def n_shards(n_rows: int, shard_size: int) -> int:
    return max(1, math.ceil(n_rows / shard_size))


def shard_names(n_rows: int, shard_size: int) -> list[str]:
    return [f"{i:05d}" for i in range(n_shards(n_rows, shard_size))]


def shard_slice(shard: str, shard_size: int) -> slice:
    start = int(shard) * shard_size
    return slice(start, start + shard_size)


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
