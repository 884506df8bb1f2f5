"""blindspot: build and score multimodal evaluation benchmarks (ProtoBias, HumbleBench).

From Python, `blindspot.evaluate(...)` runs what `blindspot evaluate` runs and returns its table
(docs/usage.md#from-python), and `blindspot.Scorer(metric)` scores prompts and images in memory. Imported
when first used: a workflow job imports this package too, and needs none of it."""

from typing import Any

__all__ = ["Scorer", "evaluate"]


def __getattr__(name: str) -> Any:
    if name == "evaluate":
        from blindspot.evaluate_run import evaluate

        return evaluate
    if name == "Scorer":
        from blindspot.scorer import Scorer

        return Scorer
    raise AttributeError(f"module 'blindspot' has no attribute {name!r}")
