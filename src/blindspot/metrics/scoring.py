"""Score benchmark pairs with one metric, through a cache of scores.

A score is cached per (metric, model id, revision, settings, image sha256, prompt), where the
settings are the metric's config `args` and the version of its prompt template, if any:
adding pairs, or re-running after a crash, scores only what is new, and the model is loaded only
when something is. Each entry is one small JSON file written atomically, so parallel jobs of one
metric share the cache safely.

A metric may return a score with a `failure` (an API judge's reply that held no answer, after its
retries): it goes into the table as NaN with its reason, is counted by reason, and is never cached,
so the next run asks again. A shard with no answer at all fails: its metric is misconfigured.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import tables
from blindspot.config import model_spec
from blindspot.images import image_batches, read_rgb
from blindspot.io import stable_id, write_json
from blindspot.metrics import Metric, Score, normalise
from blindspot.prompts import PromptTemplate

ROLES = ("corr", "adv")
# Registry keys that decide where or how fast a model runs, or who may call it, not its scores.
RUN_ONLY_KEYS = {"gpus", "licence", "client", "api_key_env", "endpoint", "engine_args", "max_model_len", "build"}


class NoAnswers(RuntimeError):
    """A metric gave no item of a shard an answer: every one came back with a failure."""


def image_sha256(path: str | Path) -> str:
    """The image's content hash: its `.sha256` sidecar (written by the render stage) or the file's."""
    sidecar = Path(f"{path}.sha256")
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
        """The cached score and the bounds it is normalised within."""
        path = self._path(key)
        if not path.exists():
            return None
        entry = json.loads(path.read_text())
        return Score(math.nan if entry["raw"] is None else entry["raw"], entry["detail"]), tuple(entry["bounds"])

    def put(self, key: str, score: Score, bounds: tuple[float, float]) -> None:
        raw = None if math.isnan(score.raw) else score.raw
        write_json(self._path(key), {"raw": raw, "detail": score.detail, "bounds": list(bounds)})


def metric_identity(config: dict[str, Any], name: str) -> dict[str, str]:
    """What the cache knows a metric by, from config alone (no model loaded): its plug-in and
    `args`, its template's version, and the settings of its model entries that change a score (dtype,
    an API's request fields; a helper model's too, such as AlignScore's captioner), not where or how
    fast they run."""
    entry = config["evaluation"]["metrics"][name]
    spec = model_spec(config, entry["model"])
    args = entry.get("args", {})

    def settings(model: str) -> dict[str, Any]:
        return {key: value for key, value in config["models"][model].items() if key not in RUN_ONLY_KEYS}

    helpers = {arg: settings(model) for arg, model in entry.get("models", {}).items()}
    version = json.dumps(
        {"plugin": entry["plugin"], "args": args, "model": settings(entry["model"])}
        | ({"models": helpers} if helpers else {}),
        sort_keys=True,
    )
    if "template" in args:
        version += " " + PromptTemplate.load(args["template"]).version
    return {"model_id": spec.model_id, "revision": spec.revision or "", "version": version}


def score_batches(
    metric: Metric, name: str, prompts: Sequence[str], paths: Sequence[str], batch_size: int
) -> Iterator[list[Score]]:
    """The metric's scores of each (prompt, image file), `batch_size` at a time and in order: the next
    batch's images decode while the metric scores this one, and no others are held."""
    pairs = list(zip(prompts, paths, strict=True))
    for batch, images in image_batches(pairs, batch_size, lambda pair: read_rgb(pair[1]), desc=f"score {name}"):
        yield metric.score([prompt for prompt, _ in batch], images)


def score_pairs(
    pairs: pd.DataFrame, name: str, identity: dict[str, str], load: Callable[[], Metric], cache: ScoreCache,
    batch_size: int = 8,
) -> tuple[pd.DataFrame, dict[str, Any]]:  # fmt: skip
    """M(T, I_corr) and M(T, I_adv) for each pair (`pair_id`, `domain`, `neutral_prompt`,
    `corr_path`, `adv_path`). `identity` is the metric's model_id, revision and version as the
    cache knows them before loading; `load` builds the metric, and is called only on a cache miss.
    Images are read and scored `batch_size` at a time, and each score is cached as its batch ends."""
    started = time.monotonic()
    keys, scores, missing, failures = {}, {}, [], Counter()
    for pair in pairs.itertuples(index=False):
        for role in ROLES:
            image = getattr(pair, f"{role}_path")
            key = ScoreCache.key(name, identity["model_id"], identity["revision"], identity["version"],
                                 image_sha256(image), pair.neutral_prompt)  # fmt: skip
            keys[pair.pair_id, role] = key
            cached = cache.get(key)
            if cached is None:
                missing.append((key, pair.neutral_prompt, image))
            else:
                scores[key] = cached
    if missing:
        metric = load()
        unique = list({key: (prompt, image) for key, prompt, image in missing}.items())
        fresh = itertools.chain.from_iterable(
            score_batches(metric, name, [p for _, (p, _) in unique], [i for _, (_, i) in unique], batch_size)
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
        row = {"pair_id": pair.pair_id, "domain": pair.domain, "metric": name, "model_id": identity["model_id"],
               "model_revision": identity["revision"], "prompt": pair.neutral_prompt}  # fmt: skip
        for role in ROLES:
            score, bounds = scores[keys[pair.pair_id, role]]
            row |= {f"{role}_raw": score.raw, f"{role}_score": normalise(score.raw, bounds),
                    f"{role}_detail": score.detail}  # fmt: skip
        rows.append(row)
    frame = pd.DataFrame(rows, columns=[field.name for field in tables.METRIC_SCORES])
    counters = {
        "pairs": len(frame),
        "images_scored": len({key for key, _, _ in missing}) - failures.total(),
        "cache_hits": 2 * len(frame) - len(missing),
        "failed": dict(failures),
        "seconds": round(time.monotonic() - started, 3),
    }
    return frame, counters
