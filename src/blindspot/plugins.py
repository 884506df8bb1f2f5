"""T2I metric plug-ins: each scores M(T, I) for a prompt T and an image I.

A plug-in is a class (or factory) that follows `Metric`, named by a metric's `plugin:` in the
config: a built-in one of this package (`PLUGINS`), any importable `module:Class`, or an installed
package's entry point in the group `blindspot.metrics` (docs/metrics.md). It is built as
`Class(spec, batch_size, **args)`, `spec` the resolved registry entry of the metric's model, or None for
a plug-in that loads no registry model (`model_free_resources`). Scores keep their raw value; `normalise`
maps it to [0, 1] with the plug-in's `bounds` for reporting. `score_batches` runs a plug-in over image
files a batch at a time.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from blindspot import targets
from blindspot.images import Backoff, image_batches, read_rgb


@dataclass(frozen=True)
class Score:
    raw: float  # the metric's own number; NaN when the metric could not score (counted as a failure)
    detail: str = ""  # what else the metric said (a judge's text), kept for inspection


class Metric(Protocol):
    name: str  # the registry name (a model-free plug-in's own)
    model_id: str  # "" for a plug-in that loads no registry model
    revision: str
    bounds: tuple[float, float]  # the raw score's range, for normalisation

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        """One score per (prompt, PIL image) pair, in order."""


# The package of the built-in plug-ins, one module each.
BUILT_IN_PACKAGE = "blindspot.metrics"
# plug-in name (`evaluation.metrics.*.plugin` in config) -> "module:class", imported when used.
PLUGINS = {
    "clip_similarity": "blindspot.metrics.clip_similarity:ClipSimilarity",
    "vqa_score": "blindspot.metrics.vqa_score:VQAScore",
    "clip_flant5": "blindspot.metrics.clip_flant5:CLIPFlanT5",
    "vlm_judge": "blindspot.metrics.vlm_judge:VLMJudge",
    "api_judge": "blindspot.metrics.api_judge:api_judge_plugin",
    "blip2_score": "blindspot.metrics.blip2_score:Blip2Score",
    "hpsv2": "blindspot.metrics.hpsv2:HPSv2",
    "image_reward": "blindspot.metrics.image_reward:ImageReward",
    "align_score": "blindspot.metrics.align_score:AlignScore",
    "protoscore": "blindspot.metrics.protoscore:ProtoScore",
}


@dataclass(frozen=True)
class HubFiles:
    """What a plug-in reads from the hub besides its model's folder, declared in its module as
    `HUB_FILES` for the hub cache (`hub.repos`), which fetches and checks exactly that."""

    # The one checkpoint file of a release read instead of the model's folder (the plug-in's
    # `checkpoint` argument renames it), and arguments that name a file beside it (when a .json).
    checkpoint: str | None = None
    file_args: tuple[str, ...] = ()
    # Arguments that name another hub repository read at its default revision, each with whether its
    # weights are read too or its configs and tokenizer only.
    repo_args: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainedBy:
    """What a plug-in that scores with the workflow's own training output declares, as `TRAINED_BY` in its
    module: the rules hand it that output, and the config must train it on the metric's model."""

    step: str  # the training step (its rule)
    output: str  # the `targets.PATHS` key of what it writes, handed to the plug-in as `trained`
    model_key: str  # the config key of the model it trains, which the metric's `model` must name


def trained_by(plugin: str) -> TrainedBy | None:
    """What trains a plug-in (its `TRAINED_BY`); None for one that scores as it comes."""
    return plugin_declaration(plugin, "TRAINED_BY", None)


def trained_metric_input(config: dict[str, Any], metric: str) -> list[str]:
    """What a metric scores with that the workflow trains (ProtoScore's adapter folder), none for the others:
    the input of its scoring rule, and what `evaluate` loads."""
    declared = trained_by(config["evaluation"]["metrics"][metric]["plugin"])
    return [targets.path(config, declared.output)] if declared else []


def plugin_declaration(plugin: str, name: str, default: Any) -> Any:
    """What a plug-in module of this package declares under `name` (its `VLMS`, `HUB_FILES`), named
    either way (`vqa_score`, `blindspot.metrics.vqa_score:VQAScore`); `default` for one from outside
    this package, which is not imported before a job builds it."""
    module, _ = plugin_target(plugin)
    if not module.startswith(f"{BUILT_IN_PACKAGE}."):
        return default
    return getattr(importlib.import_module(module), name, default)


# Installed packages register plug-ins of their own under this entry point group.
ENTRY_POINT_GROUP = "blindspot.metrics"
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_TARGET = re.compile(rf"({_DOTTED}):({_DOTTED})")


class PluginError(ValueError):
    """A metric plug-in that cannot be found or imported; the message is one line naming it."""


def plugin_target(plugin: str) -> tuple[str, str]:
    """Where a plug-in lives, (module, attribute): a built-in name (`PLUGINS`), a `module:Class` (or
    factory) as given, or an installed package's entry point of that name in `ENTRY_POINT_GROUP`."""
    if plugin in PLUGINS:
        module, attribute = PLUGINS[plugin].split(":")
        return module, attribute
    if ":" in plugin:
        matched = _TARGET.fullmatch(plugin)
        if not matched:
            raise PluginError(f"'{plugin}' is not of the form module:Class (dotted Python names)")
        return matched[1], matched[2]
    found = {(point.module, point.attr) for point in metadata.entry_points(group=ENTRY_POINT_GROUP, name=plugin)}
    if not found:
        raise PluginError(
            f"'{plugin}' is no built-in plug-in ({', '.join(PLUGINS)}), no module:Class, and no installed "
            f"package's entry point in the group '{ENTRY_POINT_GROUP}'"
        )
    if len(found) > 1:
        shown = ", ".join(sorted(f"{module}:{attribute}" for module, attribute in found))
        raise PluginError(f"'{plugin}': several installed packages' entry points have that name ({shown})")
    module, attribute = next(iter(found))
    if attribute is None:
        raise PluginError(f"'{plugin}': its entry point names module '{module}', not module:Class")
    return module, attribute


def _module_spec(plugin: str, module: str) -> Any:
    """The module's import spec, found without running it (only its parent packages run)."""
    try:
        found = find_spec(module)
    except ImportError as error:
        raise PluginError(f"'{plugin}': cannot import module '{module}' ({error})") from None
    if found is None:
        raise PluginError(f"'{plugin}': module '{module}' is not importable (not installed, nor on the Python path)")
    return found


def check_plugin(plugin: str) -> None:
    """Whether a plug-in can be found, without importing it (importing may load torch): its form, its
    entry point, and its module on the Python path; a missing class shows when a job loads it."""
    if plugin not in PLUGINS:
        _module_spec(plugin, plugin_target(plugin)[0])


def plugin_builder(plugin: str) -> Callable[..., Metric]:
    """The class or factory that builds the plug-in."""
    module_name, attribute = plugin_target(plugin)
    try:
        built: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise PluginError(f"'{plugin}': cannot import module '{module_name}' ({error})") from None
    for part in attribute.split("."):
        if not hasattr(built, part):
            raise PluginError(f"'{plugin}': module '{module_name}' has no '{attribute}'")
        built = getattr(built, part)
    return built


def model_free_resources(plugin: str) -> dict[str, Any] | None:
    """None for a plug-in that builds on a registry model (every built-in one, and any class that says
    nothing); for one whose class says `registry_model = False` (a heuristic, or one that brings its own
    weights), what its jobs need instead: its class's `resources` ({"gpus": 1, "weights_gb": 2.0}), {} for
    a CPU. This imports the plug-in, so the workflow never calls it (a plug-in from outside is imported
    first by its job, in the job's env); `blindspot evaluate` and `blindspot.api.Scorer` do, for a
    `--metric module:Class` without `@MODEL`, and copy what it says into the metric's entry."""
    built = plugin_builder(plugin)
    if getattr(built, "registry_model", True) is not False:
        return None
    return dict(getattr(built, "resources", {}))


def plugin_arguments(plugin: str) -> tuple[str, ...] | None:
    """The arguments a built-in plug-in takes besides its model and batch size (what a metric's `args`
    and `models` may name), without loading a model; None for one from outside this package (not
    imported before a job builds it) or one that takes any keyword."""
    import inspect

    if plugin not in PLUGINS:
        return None
    parameters = list(inspect.signature(plugin_builder(plugin)).parameters.values())[2:]
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return None
    return tuple(parameter.name for parameter in parameters if parameter.name != "cache_dir")  # given by the job


def plugin_code(plugin: str) -> dict[str, str]:
    """What identifies a plug-in's code, for the score cache and the job's params: its module, and as
    its version, for a built-in plug-in its module's `SCORE_VERSION`, bumped by whoever changes how it
    scores (its own module or code it scores through, such as `models.vlm_scoring`), so that cached
    scores of the old code are not reused; for one from outside this package, its distribution's
    version when installed, else a hash of its source (its package's .py files), so that new code
    scores again."""
    module, _ = plugin_target(plugin)
    if plugin in PLUGINS:
        version = getattr(importlib.import_module(module), "SCORE_VERSION", None)
        if not isinstance(version, int):
            raise PluginError(f"'{plugin}': module '{module}' has no SCORE_VERSION (an int)")
        return {"module": module, "version": f"SCORE_VERSION {version}"}
    top_level = module.split(".")[0]
    distributions = metadata.packages_distributions().get(top_level, [])
    if distributions:
        name = distributions[0]
        return {"module": module, "version": f"{name} {metadata.version(name)}"}
    found = _module_spec(plugin, module)
    if found.origin is None or not Path(found.origin).is_file():
        raise PluginError(f"'{plugin}': module '{module}' has no source file to identify it by")
    origin = Path(found.origin)
    files = sorted(origin.parent.rglob("*.py")) if found.submodule_search_locations else [origin]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.relative_to(origin.parent).as_posix().encode() + b"\0" + file.read_bytes())
    return {"module": module, "version": f"sha256:{digest.hexdigest()}"}


def load_metric(plugin: str, spec: Any, batch_size: int, cache_dir: str, **args: Any) -> Metric:
    """Build a plug-in once per job: the model from its registry entry (`spec`, None for a plug-in that
    loads no registry model), the rest from `args`. A plug-in that keeps files of its own (an API judge's
    responses) gets the metric's cache folder."""
    import inspect

    build = plugin_builder(plugin)
    if "cache_dir" in inspect.signature(build).parameters:
        args = args | {"cache_dir": cache_dir}
    return build(spec, batch_size, **args)


class MetricSkipped(RuntimeError):
    """A metric that cannot run here (an API judge without its key); the run goes on without it."""


def normalise(raw: float, bounds: tuple[float, float]) -> float:
    """Map a raw score to [0, 1] within its bounds (clipped; NaN stays NaN). An unbounded score (a
    learned scorer's logit, bounds of infinity) goes through the logistic function."""
    low, high = bounds
    if raw != raw:
        return raw
    if math.isinf(low) or math.isinf(high):
        return 1.0 / (1.0 + math.exp(-max(min(raw, 700.0), -700.0)))
    return min(1.0, max(0.0, (raw - low) / (high - low)))


def batches(name: str, prompts: Sequence[Any], images: Sequence[Any], size: int) -> Iterator[tuple[list, list]]:
    """(prompts, images) in batches of `size`, with a progress bar when there are several (a job hands
    over one batch at a time, and shows its own); the two lists must pair up."""
    if len(prompts) != len(images):
        raise ValueError(f"{name}: {len(prompts)} prompts for {len(images)} images")
    for start in tqdm(range(0, len(images), size), desc=f"score {name}", unit="batch", disable=len(images) <= size):
        yield list(prompts[start : start + size]), list(images[start : start + size])


def score_batches(
    metric: Metric, name: str, prompts: Sequence[str], paths: Sequence[str], batch_size: int
) -> Iterator[list[Score]]:
    """The metric's scores of each (prompt, image file), `batch_size` at a time and in order: the next
    batch's images decode while the metric scores this one, and no others are held. A batch that runs out of
    GPU memory is scored in halves, and the job goes on at the size that ran (`images.Backoff`)."""
    pairs = list(zip(prompts, paths, strict=True))
    backoff = Backoff(name)
    for batch, images in image_batches(pairs, batch_size, lambda pair: read_rgb(pair[1]), desc=f"score {name}"):
        yield backoff.run(lambda part, shown: metric.score([prompt for prompt, _ in part], shown), batch, images)
