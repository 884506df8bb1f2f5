"""blindspot from Python (docs/usage.md#from-python-notebooks): `evaluate(...)` runs what `blindspot
evaluate` runs and returns its table, `Scorer(metric)` scores prompts and images in memory, and
`read_records(path)` reads a run's per-item records, failures first (docs/usage.md#per-item-records).
Here rather than in the package's `__init__`, which every module of the package imports, so that this
re-export closes no import cycle."""

from blindspot.evaluate.records import read_records
from blindspot.evaluate.run import evaluate
from blindspot.evaluate.scorer import Scorer

__all__ = ["Scorer", "evaluate", "read_records"]
