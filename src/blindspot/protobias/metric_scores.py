"""ProtoBias's scoring harness: score benchmark pairs with one metric, through a cache of scores.

A score is cached per (metric, model id, revision, settings, image sha256, prompt), where the
settings are the metric's config `args`, the version of its prompt template, if any, and the
version of its plug-in's code (`plugin_code`):
adding pairs, or re-running after a crash, scores only what is new, and the model is loaded only
when something is. Each entry is one small JSON file written atomically, so parallel jobs of one
metric share the cache safely; a job removes what a killed run left half-written for the entries it
is about to score, and only for those.

A metric may return a score with a `failure` (an API judge's reply that held no answer, after its
retries): it goes into the table as NaN with its reason, is counted by reason, and is never cached,
so the next run asks again. A shard with no answer at all fails: its metric is misconfigured.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import schemas
from blindspot.images import hash_sidecar
from blindspot.io import remove_stale_temps, stable_id, write_json
from blindspot.models.spec import ModelSpec
from blindspot.plugins import Metric, MetricSkipped, Score, load_metric, normalise, score_batches
from blindspot.prompts import PromptTemplate
from blindspot.registry import output_settings

log = logging.getLogger(__name__)

ROLES = ("corr", "adv")


class NoAnswers(RuntimeError):
    """A metric gave no item of a shard an answer: every one came back with a failure."""


def image_sha256(path: str | Path) -> str:
    """The image's content hash: its `.sha256` sidecar (written by the render stage) or the file's."""
    sidecar = hash_sidecar(path)
    if sidecar.exists():
        return sidecar.read_text().split()[0]
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class ScoreCache:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    @staticmethod
    def key(metric: str, model_id: str, revision: str, version: str, image: str, prompt: str) -> str:
        return stable_id(metric, model_id, revision, version, image, prompt)

    def get(self, key: str) -> tuple[Score, tuple[float, float]] | None:
        """The cached score and the bounds it is normalised within; None for an entry that is not there, or
        that a crashed node left empty or cut off (renamed into place before its data reached the disk),
        which is then scored again and replaced."""
        path = self._path(key)
        if not path.exists():
            return None
        try:
            entry = json.loads(path.read_text())
            return Score(math.nan if entry["raw"] is None else entry["raw"], entry["detail"]), tuple(entry["bounds"])
        except (ValueError, KeyError, TypeError):
            log.warning("score cache entry %s is unreadable: scoring it again", path)
            return None

    def put(self, key: str, score: Score, bounds: tuple[float, float]) -> None:
        raw = None if math.isnan(score.raw) else score.raw
        write_json(self._path(key), {"raw": raw, "detail": score.detail, "bounds": list(bounds)})

    def remove_half_written(self, keys: Iterable[str]) -> None:
        """Remove what a killed job left half-written for these entries. Only for the keys a job is about to
        score: the metric's other jobs share the folder, writing their own shards' keys."""
        removed = remove_stale_temps(map(self._path, keys))
        if removed:
            log.info("removed %d temporary file(s) a killed run left in the score cache", len(removed))


def metric_score_settings(registry: Mapping[str, Mapping[str, Any]], entry: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a metric's registry models that change a score (dtype, an API's request fields;
    a helper model's too, such as AlignScore's captioner), not where or how fast they run: `model`, and
    `models` by argument when the metric has helpers (`config.output_settings`). The workflow passes them
    to `score_metric`. A metric that loads no registry model has no `model` here."""
    helpers = {arg: output_settings(registry[model]) for arg, model in entry.get("models", {}).items()}
    own = {"model": output_settings(registry[entry["model"]])} if "model" in entry else {}
    return own | ({"models": helpers} if helpers else {})


def metric_identity(
    entry: Mapping[str, Any],
    spec: ModelSpec | None,
    score_settings: Mapping[str, Any],
    code: Mapping[str, str],
    template: str | None = None,
    trained: str | None = None,
) -> dict[str, str]:
    """What the cache knows a metric by, with no model loaded: its model's id and revision (empty for a
    plug-in that loads no registry model, `spec` None: its code is what it is known by); as its
    version, its plug-in, `args` and `code` (`plugin_code`), its models' `score_settings`
    (`metric_score_settings`), the version of its prompt `template` and the weights of a `trained`
    scorer (a retrained scorer is another metric)."""
    version = json.dumps(
        {"plugin": entry["plugin"], "args": entry.get("args", {}), "plugin_code": dict(code)} | dict(score_settings),
        sort_keys=True,
    )
    if template:
        version += " " + PromptTemplate.load(template).version
    if trained:
        from blindspot.models.protoscore_model import trained_sha256

        version += " trained:" + trained_sha256(trained)
    if spec is None:
        return {"model_id": "", "revision": "", "version": version}
    return {"model_id": spec.model_id, "revision": spec.revision or "", "version": version}


def metric_loader(
    entry: Mapping[str, Any],
    spec: ModelSpec | None,
    helpers: Mapping[str, ModelSpec],
    batch_size: int,
    cache_dir: str,
    trained: str | None,
    api_key_is_set: bool,
) -> Callable[[], Metric]:
    """How `score_pairs` builds a metric when it has something to score: its plug-in with its model (None
    for one that loads no registry model), its `args` and helper models, and a `trained` scorer's folder.
    A metric whose model needs an API key that is not set is skipped (MetricSkipped), as its plug-in would be."""

    def load() -> Metric:
        if spec is not None and spec.api_key_env and not api_key_is_set:
            from blindspot.metrics.api_judge import key_not_set

            raise key_not_set(spec.name, spec.api_key_env)
        learned = {"trained": trained} if trained else {}
        return load_metric(entry["plugin"], spec, batch_size, cache_dir, **entry.get("args", {}), **helpers, **learned)

    return load


def shard_test_pairs(
    pairs: pd.DataFrame, triplets: pd.DataFrame, seed_ids: Iterable[str], seed: int, test_fraction: float
) -> pd.DataFrame:
    """The kept pairs of the test split among the seeds of one shard: what a metric's job scores. The
    split is a function of the seed id, so a job reads only its own domain's tables."""
    from blindspot.protobias.split import kept_with_splits

    _, kept = kept_with_splits(pairs, triplets, seed, test_fraction)
    return kept[(kept["split"] == "test") & kept["seed_id"].isin(list(seed_ids))]


def score_pairs(
    pairs: pd.DataFrame,
    name: str,
    identity: dict[str, str],
    load: Callable[[], Metric],
    cache: ScoreCache,
    batch_size: int = 8,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """M(T, I_corr) and M(T, I_adv) for each pair (`pair_id`, `domain`, `neutral_prompt`,
    `corr_path`, `adv_path`). `identity` is the metric's model_id, revision and version as the
    cache knows them before loading; `load` builds the metric, and is called only on a cache miss.
    Images are read and scored `batch_size` at a time, and each score is cached as its batch ends."""
    started = time.monotonic()
    keys, scores, missing, failures = {}, {}, [], Counter()
    for pair in pairs.itertuples(index=False):
        for role in ROLES:
            image = getattr(pair, f"{role}_path")
            key = ScoreCache.key(
                name,
                identity["model_id"],
                identity["revision"],
                identity["version"],
                image_sha256(image),
                pair.neutral_prompt,
            )
            keys[pair.pair_id, role] = key
            cached = cache.get(key)
            if cached is None:
                missing.append((key, pair.neutral_prompt, image))
            else:
                scores[key] = cached
    if missing:
        cache.remove_half_written(key for key, _, _ in missing)
        metric = load()
        unique = list({key: (prompt, image) for key, prompt, image in missing}.items())
        # a metric may set its own batch: an API judge's is rounds of its requests in flight (`ClientSettings.batch`)
        batch = getattr(metric, "batch_size", batch_size)
        fresh = itertools.chain.from_iterable(
            score_batches(metric, name, [p for _, (p, _) in unique], [i for _, (_, i) in unique], batch)
        )
        for (key, _), score in zip(unique, fresh, strict=True):
            failure = getattr(score, "failure", "")
            if failure:
                failures[failure] += 1
            else:
                cache.put(key, score, metric.bounds)
            scores[key] = score, metric.bounds
        if failures.total() == len(set(keys.values())):
            raise NoAnswers(
                f"{name}: model '{identity['model_id']}' answered none of the {failures.total()} items of this shard "
                f"({', '.join(f'{reason}: {n}' for reason, n in failures.most_common())}); nothing was cached, a "
                f"rerun asks again; the last: {score.detail}"
            )
    rows = []
    for pair in pairs.itertuples(index=False):
        row = {
            "pair_id": pair.pair_id,
            "domain": pair.domain,
            "metric": name,
            "model_id": identity["model_id"],
            "model_revision": identity["revision"],
            "prompt": pair.neutral_prompt,
        }
        for role in ROLES:
            score, bounds = scores[keys[pair.pair_id, role]]
            row |= {
                f"{role}_raw": score.raw,
                f"{role}_score": normalise(score.raw, bounds),
                f"{role}_detail": score.detail,
            }
        rows.append(row)
    frame = pd.DataFrame(rows, columns=[field.name for field in schemas.METRIC_SCORES])
    computed = len({key for key, _, _ in missing})
    counters = {
        "pairs": len(frame),
        "images_scored": computed - failures.total(),
        "cache_hits": 2 * len(frame) - len(missing),
        "failed": dict(failures),
        "computed_items": computed,  # failed ones too: the model ran on them
        "seconds": round(time.monotonic() - started, 3),
    }
    return frame, counters


def score_or_skip(
    pairs: pd.DataFrame,
    name: str,
    identity: dict[str, str],
    load: Callable[[], Metric],
    cache: ScoreCache,
    batch_size: int,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """`score_pairs`, or for a metric that cannot run here (an API judge without its key) no rows and
    the reason as the counters: the run goes on without it."""
    try:
        return score_pairs(pairs, name, identity, load, cache, batch_size)
    except MetricSkipped as skipped:
        log.warning("%s", skipped)
        return pd.DataFrame(columns=[field.name for field in schemas.METRIC_SCORES]), {"skipped": str(skipped)}
