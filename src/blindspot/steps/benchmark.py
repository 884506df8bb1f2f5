"""The benchmark (workflow/rules/benchmark.smk): the train/test split with the annotation subsets, and the
Hugging Face dataset export."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import schemas
from blindspot.io import read_table, write_table, write_text
from blindspot.steps import spec, write_counters


def split_benchmark(
    pairs: Sequence[str],
    triplets: Sequence[str],
    out: str,
    filter_validation: str,
    preference_pairs: str,
    counters_out: str,
    domains: Sequence[str],
    vlms: Sequence[str],
    test_fraction: float,
    threshold: float,
    filter_validation_images: int,
    preference_pairs_per_domain: int,
    seed: int,
) -> None:
    """Split the kept pairs by triplet; draw the two disjoint annotation subsets (the filter validation's from
    the images every one of the filter's `vlms` scored)."""
    from blindspot.protobias import split

    benchmark = split.split_benchmark(
        pd.concat([read_table(p, schemas.PAIRS) for p in pairs], ignore_index=True),
        pd.concat([read_table(p, schemas.TRIPLETS) for p in triplets], ignore_index=True),
        domains,
        vlms,
        test_fraction,
        threshold,
        filter_validation_images,
        preference_pairs_per_domain,
        seed,
    )
    write_table(out, benchmark.pairs[schemas.BENCHMARK_PAIRS.names], schemas.BENCHMARK_PAIRS)
    write_table(filter_validation, benchmark.filter_validation, schemas.ANNOTATION_IMAGES)
    write_table(preference_pairs, benchmark.preference[schemas.ANNOTATION_PAIRS.names], schemas.ANNOTATION_PAIRS)
    write_counters(counters_out, benchmark.counters, "benchmark")


def export_dataset(
    benchmark: str,
    out: str,
    card: str,
    name: str,
    run_name: str,
    threshold: float,
    models: dict[str, list[dict[str, Any]]],
) -> None:
    """The benchmark as a `datasets`-loadable folder with a dataset card (also beside it, for the report)."""
    from blindspot.protobias.export import export_dataset as export
    from blindspot.protobias.export import model_rows

    about = {
        "name": name,
        "run_name": run_name,
        "threshold": threshold,
        "models": model_rows({role: [spec(model) for model in specs] for role, specs in models.items()}),
    }
    export(read_table(benchmark, schemas.BENCHMARK_PAIRS), out, about)
    write_text(card, (Path(out) / "README.md").read_text())
