"""blindspot: build and score multimodal evaluation benchmarks (ProtoBias, HumbleBench).

From Python, `blindspot.evaluate(...)` runs what `blindspot evaluate` runs and returns its table
(docs/usage.md#from-python-notebooks), `blindspot.Scorer(metric)` scores prompts and images in memory, and
`blindspot.read_records(path)` reads a run's per-item records, failures first
(docs/usage.md#per-item-records). Imported when first used: a workflow job imports this package too,
and needs none of it."""

from typing import Any

__all__ = ["Scorer", "evaluate", "read_records"]


def __getattr__(name: str) -> Any:
    if name == "evaluate":
        from blindspot.evaluate_run import evaluate

        return evaluate
    if name == "Scorer":
        from blindspot.scorer import Scorer

        return Scorer
    if name == "read_records":
        from blindspot.evaluate_records import read_records

        return read_records
    raise AttributeError(f"module 'blindspot' has no attribute {name!r}")
