"""Every step of the workflow, said once: the one place that lists them.

A step is one rule of `workflow/rules/<stage>.smk`, run by the function of its name (or of `function`)
in `blindspot.steps.<stage>`. Its entry says what the rest of the project derives from it: the rule's
log and benchmark names (its `wildcards`), `localrules`, its conda env, the models it loads (and so
its GPUs, memory and time, `blindspot.resources`), its work per job (`blindspot plan`), the config's
`throughput:` keys, and the kind of output `blindspot targets` selects it by. Adding a step is a rule,
an entry here and its function.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from blindspot.config import ConfigError, as_list, config_value
from blindspot.paths import ENV_DIR
from blindspot.registry import BACKENDS, MODEL_ENV, metric_models, vlm_settings
from blindspot.shards import shard_slice
from blindspot.targets import scores_annotated_only

Config = dict[str, Any]
Wildcards = dict[str, str]
# Wildcards that say where a job's items come from, not which model it runs.
DATA_WILDCARDS = ("domain", "shard", "setting")
# A step's `env` that depends on its model: vLLM's env for a model it serves, else the vision env.
BY_MODEL_BACKEND = "by_model_backend"


@dataclass(frozen=True)
class Step:
    name: str
    stage: str  # its rules file, workflow/rules/<stage>.smk, and its module, blindspot.steps.<stage>
    env: str = "base"  # workflow/envs/<env>.yaml, or BY_MODEL_BACKEND
    wildcards: tuple[str, ...] = ()  # the job's name in its log and benchmark paths, in this order
    # The models it loads, one after another: a wildcard that names one (`metric`: the metric's models),
    # or a dotted config key that holds a name or a list of names.
    loads: tuple[str, ...] = ()
    local: bool = False  # runs on the submit host: seconds of work, or the internet
    data: bool = False  # loads no model but decodes or writes every image of the run (CPUs, time)
    # The batch its images pass in: a config key and images per item, or a function of the job giving the images
    image_batch: tuple[str, int] | Callable[[Config, Wildcards], int] | None = None
    throughput: bool = False  # its time: items x the `throughput:` table's seconds per item
    output: str | None = None  # the kind (`blindspot.targets.PATHS`) of the output of a domain's shard
    items: Callable[[Config, Wildcards], int] | None = None  # one job's work at most, for its time and the plan
    # One job's work at the config's expected acceptance shares (`expected_items`); None: `items` itself.
    expected: Callable[[Config, Wildcards], float] | None = None
    function: str | None = None  # the step function when it is another step's


def _seeds(config: Config, wildcards: Wildcards) -> int:
    return config["domains"][wildcards["domain"]]["n_seeds"]


def _shard_seeds(config: Config, wildcards: Wildcards) -> int:
    """Seeds in the job's shard: the size of the slice the step takes."""
    return len(range(_seeds(config, wildcards))[shard_slice(wildcards["shard"], config["shard_size"])])


def _images_per_seed(config: Config) -> int:
    """Images of one seed per T2I model: both descriptions of every generator's triplet (an upper bound)."""
    return 2 * len(config["prompt_stage"]["generators"]) * config["image_stage"]["images_per_description"]


def pairs_per_triplet(config: Config) -> int:
    """Candidate pairs of one accepted triplet: I_corr and I_adv of one T2I model and one noise seed
    (`blindspot.protobias.consensus.pair_images`), images_per_description of them per T2I model."""
    return config["image_stage"]["images_per_description"] * len(config["image_stage"]["t2i_models"])


def _shard_images(config: Config, wildcards: Wildcards) -> int:
    return _shard_seeds(config, wildcards) * _images_per_seed(config)


def _shard_pair_images(config: Config, wildcards: Wildcards) -> int:
    """Images of a shard's pairs over every T2I model: every pair kept."""
    return _shard_images(config, wildcards) * len(config["image_stage"]["t2i_models"])


def annotated_images_per_domain(config: Config, metric: str) -> int | None:
    """The images of a domain's annotated pairs when `metric` scores only those (`evaluation.api_metrics_score`):
    no job of the metric, nor all of a domain's together, scores more; None when it scores the whole split."""
    return 2 * config["benchmark"]["preference_pairs_per_domain"] if scores_annotated_only(config, metric) else None


def _api_shard_pair_images(config: Config, wildcards: Wildcards) -> int:
    """An API metric's shard: its pairs' images, or when it scores only the annotated pairs, no more than
    its domain's annotated pairs' images (`annotated_images_per_domain`)."""
    images = _shard_pair_images(config, wildcards)
    cap = annotated_images_per_domain(config, wildcards["metric"])
    return images if cap is None else min(images, cap)


def _domain_triplets(config: Config, wildcards: Wildcards) -> int:
    return _seeds(config, wildcards) * len(config["prompt_stage"]["generators"])


def _domain_pairs(config: Config, wildcards: Wildcards) -> int:
    return _domain_triplets(config, wildcards) * pairs_per_triplet(config)


def run_images(config: Config) -> int:
    """Images of the whole run over every T2I model (an upper bound)."""
    seeds = sum(spec["n_seeds"] for spec in config["domains"].values())
    return seeds * _images_per_seed(config) * len(config["image_stage"]["t2i_models"])


def answer_batch(config: Config, vlm: str) -> int:
    """Questions per call to `vlm` as it answers: `humblebench.vllm_batch_size` on vLLM (its engine schedules
    within a call, and a call waits for its longest answer), `humblebench.batch_size` on any other backend."""
    humble = config["humblebench"]
    return humble["vllm_batch_size"] if config["models"][vlm]["backend"] == "vllm" else humble["batch_size"]


def _humble_answer_batch(config: Config, wildcards: Wildcards) -> int:
    return answer_batch(config, wildcards["vlm"])


def _humble_answers(config: Config, wildcards: Wildcards, benchmark_images: float) -> int:
    """The release's questions (`release_questions`) and two per benchmark image, over the shards, each asked in
    every setting the VLM answers (`registry.vlm_settings`)."""
    humble = config["humblebench"]
    questions = humble.get("release_questions", 0) + (2 * benchmark_images if humble.get("from_benchmark") else 0)
    return math.ceil(questions / humble["answer_shards"]) * len(vlm_settings(config, wildcards["vlm"]))


def _humble_shard_answers(config: Config, wildcards: Wildcards) -> int:
    """A shard's answers when every candidate image is kept."""
    return _humble_answers(config, wildcards, run_images(config))


def _training_pairs(config: Config, wildcards: Wildcards) -> int:
    return round(run_images(config) // 2 * (1 - config["benchmark"]["test_fraction"]))


# The expected shares of what reaches a step: the upper bounds above are every candidate kept.
def _triplet_share(config: Config, wildcards: Wildcards) -> float:
    """Candidate triplets accepted (`prompt_stage.expected_acceptance`): what is rendered and judged."""
    return config["prompt_stage"].get("expected_acceptance", 1.0)


def _pair_share(config: Config, wildcards: Wildcards) -> float:
    """Candidate pairs kept by the VLM filter (`image_stage.expected_acceptance`): what is measured and scored."""
    return config["image_stage"].get("expected_acceptance", 1.0)


def _still_open_share(config: Config, wildcards: Wildcards) -> float:
    """The images a filter VLM scores under `image_stage.filter_order: sequential`: those of the pairs every
    earlier VLM passed, and the validation pool's of the rest. Each VLM is taken to pass a pair independently,
    at the root of the pair share (the share kept by all of them), as nothing finer is known before a run."""
    stage = config["image_stage"]
    earlier = stage["vlms"].index(wildcards["vlm"])
    if stage.get("filter_order", "every") == "every" or earlier == 0:
        return 1.0
    passed = _pair_share(config, wildcards) ** (earlier / len(stage["vlms"]))
    return passed + stage["validation_pool"] * (1 - passed)


def _thinned(
    items: Callable[[Config, Wildcards], int], *shares: Callable[[Config, Wildcards], float]
) -> Callable[[Config, Wildcards], float]:
    """A step's expected work: its upper bound times the shares of what reaches it."""

    def expected(config: Config, wildcards: Wildcards) -> float:
        return items(config, wildcards) * math.prod(share(config, wildcards) for share in shares)

    return expected


def _api_shard_expected_images(config: Config, wildcards: Wildcards) -> float:
    """An API metric's shard at the expected shares: when it scores only the annotated pairs, its domain's
    annotated images spread over the domain's shards as its seeds are."""
    cap = annotated_images_per_domain(config, wildcards["metric"])
    if cap is None:
        return _thinned(_shard_pair_images, _triplet_share, _pair_share)(config, wildcards)
    return cap * _shard_seeds(config, wildcards) / _seeds(config, wildcards)


def _humble_shard_expected_answers(config: Config, wildcards: Wildcards) -> int:
    """A shard's answers with the benchmark's images at the expected shares (the release's are all asked)."""
    images = run_images(config) * _triplet_share(config, wildcards) * _pair_share(config, wildcards)
    return _humble_answers(config, wildcards, images)


# fmt: off
_ENTRIES = [
    Step("build_model", "models", "build", ("model",), local=True, items=lambda config, wildcards: 1),
    Step("make_seeds", "prompts", wildcards=("domain",), local=True, items=_seeds),
    Step("generate_triplets", "prompts", "llm", ("domain", "generator", "shard"), ("generator",), throughput=True,
          output="raw_triplets", items=_shard_seeds),
    Step("judge_triplets", "prompts", "llm", ("domain", "judge", "generator", "shard"), ("judge",), throughput=True,
          output="judgments", items=_shard_seeds),
    Step("accept_triplets", "prompts", wildcards=("domain",), local=True, items=_domain_triplets),
    Step("check_prompt_quality", "prompts", "nlp", ("domain",),
          ("prompt_stage.embedding_model", "prompt_stage.nli_model"), throughput=True, items=_domain_triplets,
          expected=_thinned(_domain_triplets, _triplet_share)),
    Step("make_table1", "prompts", local=True),
    Step("render_images", "images", "t2i", ("domain", "t2i", "shard"), ("t2i",), throughput=True,
          image_batch=("image_stage.render_batch_size", 1), output="renders", items=_shard_images,
          expected=_thinned(_shard_images, _triplet_share)),
    Step("judge_images", "images", BY_MODEL_BACKEND, ("domain", "t2i", "vlm", "shard"), ("vlm",), throughput=True,
          image_batch=("image_stage.judge_batch_size", 1), output="vlm_scores", items=_shard_images,
          expected=_thinned(_shard_images, _triplet_share, _still_open_share)),
    Step("keep_consensus_pairs", "images", wildcards=("domain",), local=True, items=_domain_pairs,
         expected=_thinned(_domain_pairs, _triplet_share)),
    Step("measure_image_quality", "images", "iqa", ("domain", "shard"), ("image_stage.iqa_metrics",), throughput=True,
          image_batch=("image_stage.iqa_batch_size", 2), output="image_quality", items=_shard_pair_images,
          expected=_thinned(_shard_pair_images, _triplet_share, _pair_share)),
    Step("make_table2", "images", local=True),
    Step("split_benchmark", "benchmark", local=True),
    Step("export_dataset", "benchmark", "export", data=True),
    Step("import_dataset", "dataset", "export", data=True),
    Step("score_metric", "table3", BY_MODEL_BACKEND, ("domain", "metric", "shard"), ("metric",), throughput=True,
          image_batch=("evaluation.batch_size", 2), output="metric_scores", items=_shard_pair_images,
          expected=_thinned(_shard_pair_images, _triplet_share, _pair_share)),
    # An API judge's jobs: the same step on the submit host, where the internet is.
    Step("score_api_metric", "table3", BY_MODEL_BACKEND, ("domain", "metric", "shard"), ("metric",), local=True,
          image_batch=("evaluation.batch_size", 2), output="metric_scores", items=_api_shard_pair_images,
          expected=_api_shard_expected_images, function="score_metric"),
    Step("make_table3", "table3", local=True),
    Step("make_report_items", "table3", local=True),
    Step("write_protobias_records", "table3", local=True),
    # It reads every image the records name, to make its thumbnails.
    Step("build_item_view", "view", "export", data=True),
    # vLLM's env has transformers and xgrammar too: the describer and either kind of writer run there.
    Step("write_scene_questions", "humble", "llm",
          loads=("humblebench.scene_graphs.describer", "humblebench.scene_graphs.writer"), throughput=True,
          image_batch=("humblebench.batch_size", 1)),
    # It reads the release through Hugging Face datasets.
    Step("make_humble_questions", "humble", "export", data=True),
    Step("answer_humble", "humble", BY_MODEL_BACKEND, ("vlm", "shard"), ("vlm",), throughput=True,
          image_batch=_humble_answer_batch, items=_humble_shard_answers, expected=_humble_shard_expected_answers),
    # An API VLM's answer jobs: the same step on the submit host, where the internet is.
    Step("answer_api_humble", "humble", BY_MODEL_BACKEND, ("vlm", "shard"), ("vlm",), local=True,
          image_batch=("humblebench.batch_size", 1), items=_humble_shard_answers,
          expected=_humble_shard_expected_answers, function="answer_humble"),
    Step("sample_human_questions", "humble", local=True),
    Step("make_humble_tables", "humble", local=True),
    Step("write_humble_records", "humble", local=True),
    Step("describe_humble_questions", "humble", local=True),
    Step("train_protoscore", "protoscore", "vlm", loads=("protoscore.model",), throughput=True,
          image_batch=("protoscore.batch_size", 2), items=_training_pairs,
          expected=_thinned(_training_pairs, _triplet_share, _pair_share)),
    Step("score_transfer", "protoscore", "vlm", loads=("protoscore.model",), throughput=True,
          image_batch=("evaluation.batch_size", 2)),
    Step("make_annotation_projects", "annotation", local=True),
    Step("validate_filter", "annotation", local=True),
    Step("human_preferences", "annotation", local=True),
]
# fmt: on
STEPS: dict[str, Step] = {step.name: step for step in _ENTRIES}
LOCAL_STEPS = tuple(name for name, step in STEPS.items() if step.local)
THROUGHPUT_STEPS = tuple(name for name, step in STEPS.items() if step.throughput)
# Steps sharded by domain, with the kind of their shards' outputs: what `blindspot targets` selects.
SHARDED_STEPS = {name: step.output for name, step in STEPS.items() if step.output}


def job_name(step: str) -> str:
    """The `{job}` part of a step's log and benchmark paths, as a pattern: "{domain}/{t2i}/{shard}"."""
    return "/".join(f"{{{name}}}" for name in STEPS[step].wildcards) or "all"


def job_models(config: Config, step: str, wildcards: Wildcards) -> list[str]:
    """The registry models one job of `step` loads, in the order it loads them."""
    names: list[str] = []
    for role in STEPS[step].loads:
        if role == "metric":
            names += metric_models(config["evaluation"]["metrics"][wildcards["metric"]])
        elif role in STEPS[step].wildcards:
            names.append(wildcards[role])
        else:
            names += as_list(config_value(config, role) or [])
    return names


def job_model(config: Config, step: str, wildcards: Wildcards) -> str:
    """The one model (or metric) a job is known by, in the plan and in `throughput:`; "" for a job that
    loads several in turn or none."""
    loads = STEPS[step].loads
    if len(loads) != 1:
        return ""
    if loads[0] in STEPS[step].wildcards:
        return wildcards[loads[0]]
    value = config_value(config, loads[0])
    return value if isinstance(value, str) else ""


def throughput_key(config: Config, step: str, wildcards: Wildcards) -> str:
    """The `throughput:` entry a job's seconds per item are looked up by: its model, or `default`."""
    return job_model(config, step, wildcards) or "default"


def throughput_names(config: Config, step: str) -> set[str]:
    """The names a step's `throughput:` entries may have besides `default`: metrics for a step known by
    its metric, registry models for the others."""
    return set(config["evaluation"]["metrics"] if STEPS[step].loads == ("metric",) else config["models"])


def check_throughput(config: dict[str, Any]) -> None:
    """Refuse entries for steps that are not timed per item, and for models (or metrics) that are not in
    the config: a typo would otherwise read as missing."""
    for rule, entries in config.get("throughput", {}).items():
        if rule not in THROUGHPUT_STEPS:
            raise ConfigError(f"config key 'throughput.{rule}': '{rule}' is not one of {', '.join(THROUGHPUT_STEPS)}")
        known = throughput_names(config, rule)
        for name in entries:
            if name != "default" and name not in known:
                raise ConfigError(
                    f"config key 'throughput.{rule}.{name}': '{name}' is not one of "
                    f"{', '.join(sorted(known))} nor 'default'"
                )


def job_needs(config: Config, step: str, wildcards: Wildcards) -> list[dict[str, Any]]:
    """What each thing one job of `step` loads asks for (`gpus`, `weights_gb`), in the order it loads them:
    its models' registry entries, and for a metric that loads no registry model, the metric entry's own
    `resources` (none: a CPU and no weights of its own)."""
    needs = [config["models"][name] for name in job_models(config, step, wildcards)]
    if "metric" in STEPS[step].loads:
        metric = config["evaluation"]["metrics"][wildcards["metric"]]
        if "model" not in metric:
            needs.insert(0, metric.get("resources", {}))
    return needs


def job_gpus(config: Config, step: str, wildcards: Wildcards) -> int:
    """GPUs one job asks for: the most any of its models (or a model-free metric) needs (a job loads its
    models one after the other). The same number is vLLM's tensor parallelism. (From the registry entries,
    as `model_spec` has it, without looking up each model's cached commit for every job.)"""
    return max((need.get("gpus", 0) for need in job_needs(config, step, wildcards)), default=0)


def env_requirements(env: str) -> list[str]:
    """The pip section of workflow/envs/<env>.yaml: every package of the env comes from pip."""
    dependencies = yaml.safe_load((ENV_DIR / f"{env}.yaml").read_text())["dependencies"]
    return next((list(d["pip"]) for d in dependencies if isinstance(d, dict) and "pip" in d), [])


def job_env(config: Config, step: str, wildcards: Wildcards) -> str:
    """The env a job runs in, as its file's name under workflow/envs (e.g. "t2i")."""
    env = STEPS[step].env
    if env != BY_MODEL_BACKEND:
        return env
    models = job_models(config, step, wildcards)
    return BACKENDS[config["models"][models[0]]["backend"]].env if models else MODEL_ENV


def job_items(config: Config, step: str, wildcards: Wildcards) -> int | None:
    """One job's work (seeds, triplets, images, pairs or questions: an upper bound); None where the step
    states none."""
    items = STEPS[step].items
    return None if items is None else items(config, wildcards)


def expected_items(config: Config, step: str, wildcards: Wildcards) -> float | None:
    """One job's work at the config's expected acceptance shares (`prompt_stage.expected_acceptance`,
    `image_stage.expected_acceptance`); the upper bound where no filter comes before the step."""
    expected = STEPS[step].expected
    return job_items(config, step, wildcards) if expected is None else expected(config, wildcards)
