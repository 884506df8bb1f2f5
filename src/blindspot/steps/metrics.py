"""Scoring T2I metrics on the test split (`workflow/rules/metrics.smk`): one job per metric, domain and
seed shard, then Table 3 and the report's items."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from blindspot import tables
from blindspot.io import read_table, write_table, write_text
from blindspot.steps import log, shard_rows, spec, write_counters


def score_metric(
    domain: str, metric: str, shard: str, pairs: str, triplets: str, seeds: str, template: Sequence[str],
    trained: Sequence[str], out: str, counters_out: str, cache: str, metric_entry: dict[str, Any],
    model: dict[str, Any], models: dict[str, Any], score_settings: dict[str, Any], api_key_is_set: bool,
    split: dict[str, Any], batch_size: int, shard_size: int,
) -> None:  # fmt: skip
    """Score the kept test pairs of one seed shard with one T2I metric, M(T, I_corr) and M(T, I_adv)."""
    from blindspot.metrics.scoring import ScoreCache, metric_identity, metric_loader, score_or_skip, shard_test_pairs

    seed_ids = shard_rows(read_table(seeds, tables.SEEDS), shard, shard_size)["seed_id"]
    test = shard_test_pairs(
        read_table(pairs, tables.PAIRS), read_table(triplets, tables.TRIPLETS), seed_ids, split["seed"],
        split["test_fraction"],
    )  # fmt: skip
    scorer = spec(model)
    trained_folder = trained[0] if trained else None
    identity = metric_identity(metric_entry, scorer, score_settings, template[0] if template else None, trained_folder)
    load = metric_loader(
        metric_entry, scorer, {arg: spec(helper) for arg, helper in models.items()}, batch_size, cache,
        trained_folder, api_key_is_set,
    )  # fmt: skip
    frame, counters = score_or_skip(test, metric, identity, load, ScoreCache(cache), batch_size)
    write_counters(counters_out, counters, f"{domain}/{metric}/{shard}")
    write_table(out, frame, tables.METRIC_SCORES)


def make_table3(
    scores: Sequence[str], benchmark: str, human_choices: Sequence[str], human_row: Sequence[str], csv: str,
    markdown: str, latex: str, breakdown: str, plot: str, metrics: dict[str, Any], domains: Sequence[str],
    bootstrap_samples: int, seed: int,
) -> None:  # fmt: skip
    """Pairwise accuracy with CIs per metric, domain, knob, T2I model and subcategory; Table 3 and its plot.
    With human choices, Table 3 is computed on the annotated pairs, as in the paper."""
    from blindspot.protobias import evaluation

    all_scores = evaluation.read_scores(scores)
    humans = evaluation.read_human_choices(human_choices[0]) if human_choices else None
    long = evaluation.accuracy_breakdown(
        all_scores, read_table(benchmark, tables.BENCHMARK_PAIRS), metrics, humans, annotated_only=humans is not None,
        n_boot=bootstrap_samples, seed=seed,
    )  # fmt: skip
    evaluation.write_breakdown(long, breakdown)
    table = evaluation.table3(long, metrics, domains)
    if human_row:
        table = evaluation.with_human_kappa(table, json.loads(Path(human_row[0]).read_text()), domains)
    evaluation.write_table3(table, csv, markdown, latex)
    evaluation.plot_accuracy(long, metrics, plot, domains)
    log.info("Table 3 over %d scored rows of %d metrics", len(all_scores), len(metrics))


def make_report_items(
    benchmark: str, scores: Sequence[str], counters: Sequence[str], grid: str, csv: str, labels: dict[str, str],
    examples_per_domain: int,
) -> None:  # fmt: skip
    """The report's example grid (Figure 3) and the table of every stage's counters."""
    from blindspot.protobias.evaluation import read_scores
    from blindspot.protobias.figures import example_grid, example_pairs, stage_counters

    examples = example_pairs(read_table(benchmark, tables.BENCHMARK_PAIRS), examples_per_domain)
    example_grid(examples, read_scores(scores), labels, grid)
    write_text(csv, stage_counters(counters).to_csv(index=False))
