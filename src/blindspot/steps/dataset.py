"""A released benchmark instead of a built one (workflow/rules/dataset.smk, the config's `dataset:`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blindspot import schemas
from blindspot.io import write_table
from blindspot.steps import log, write_counters


def import_dataset(
    source_copy: Sequence[str],
    source: str,
    columns: dict[str, str],
    n_seeds: dict[str, int],
    pairs: Sequence[str],
    triplets: Sequence[str],
    seeds: Sequence[str],
    benchmark: str,
    images: str,
    counters_out: str,
    limit: int | None,
) -> None:
    """The dataset's test pairs (the `limit` of them everyone samples, given one) as the benchmark pairs Table 3
    reads, and each domain's pairs, triplets and seeds as `score_metric` reads them (`pairs`, `triplets` and
    `seeds` in the order of `n_seeds`' domains); the counters say how many of how many were sampled."""
    from blindspot.protobias import released
    from blindspot.sampling import sample_record

    every = released.read_test_pairs(source_copy[0] if source_copy else source, columns, images)
    frame = released.test_pair_sample(every, limit)
    released.check_domains(frame, n_seeds, source)
    for domain, pairs_out, triplets_out, seeds_out in zip(n_seeds, pairs, triplets, seeds, strict=True):
        kept, domain_triplets, domain_seeds = released.scoring_tables(frame, domain)
        write_table(pairs_out, kept, schemas.PAIRS)
        write_table(triplets_out, domain_triplets, schemas.TRIPLETS)
        write_table(seeds_out, domain_seeds, schemas.SEEDS)
    write_table(benchmark, frame[schemas.BENCHMARK_PAIRS.names], schemas.BENCHMARK_PAIRS)
    counts: dict[str, Any] = {
        "test_pairs": len(frame),
        "per_domain": frame.groupby("domain").size().to_dict(),
        "sample": sample_record(limit, len(frame), len(every)),
    }
    write_counters(counters_out, counts, "dataset")
    log.info("imported %d test pairs of %d from %s", len(frame), len(every), source)
