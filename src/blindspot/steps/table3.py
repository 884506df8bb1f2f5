"""Scoring T2I metrics on the test split (`workflow/rules/table3.smk`): one job per metric, domain and
seed shard, then Table 3 and the report's items."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from blindspot import schemas
from blindspot.io import read_table, write_records, write_table, write_text
from blindspot.steps import log, require_planned_code, shard_rows, spec, write_counters


def score_metric(
    domain: str,
    metric: str,
    shard: str,
    pairs: str,
    triplets: str,
    seeds: str,
    template: Sequence[str],
    trained: Sequence[str],
    annotated: Sequence[str],
    out: str,
    counters_out: str,
    cache: str,
    metric_entry: dict[str, Any],
    model: dict[str, Any] | None,
    models: dict[str, Any],
    score_settings: dict[str, Any],
    plugin_code: dict[str, str],
    api_key_is_set: bool,
    split: dict[str, Any],
    batch_size: int,
    shard_size: int,
    planned_requests: int | None = None,
) -> None:
    """Score the kept test pairs of one seed shard with one T2I metric, M(T, I_corr) and M(T, I_adv); with
    `annotated` (the preference pairs: an API metric, `accuracy.api_metrics_score: annotated`), only those
    of them that are annotated pairs. An API metric's job is given its `planned_requests` (`blindspot.bill`),
    and its client sends no more than those times `client.max_attempts`. `model` is None for a plug-in that
    loads no registry model."""
    from blindspot.models.api.client import RequestsExhausted, with_planned_requests
    from blindspot.plugins import plugin_code as code_of
    from blindspot.protobias.metric_scores import (
        ScoreCache,
        metric_identity,
        metric_loader,
        score_or_skip,
        shard_test_pairs,
    )

    running = code_of(metric_entry["plugin"])
    require_planned_code(
        running,
        plugin_code,
        f"metric {metric}: the job imports {running['module']} as {running['version']}",
        plugin_code["version"],
    )
    seed_ids = shard_rows(read_table(seeds, schemas.SEEDS), shard, shard_size)["seed_id"]
    test = shard_test_pairs(
        read_table(pairs, schemas.PAIRS),
        read_table(triplets, schemas.TRIPLETS),
        seed_ids,
        split["seed"],
        split["test_fraction"],
    )
    if annotated:
        shard_pairs = len(test)
        test = test[test["pair_id"].isin(read_table(annotated[0], schemas.ANNOTATION_PAIRS)["pair_id"])]
        log.info("%s: scoring the %d annotated pairs among this shard's %d test pairs", metric, len(test), shard_pairs)
    model = with_planned_requests(model, planned_requests)
    scorer = None if model is None else spec(model)
    trained_folder = trained[0] if trained else None
    identity = metric_identity(
        metric_entry, scorer, score_settings, plugin_code, template[0] if template else None, trained_folder
    )
    load = metric_loader(
        metric_entry,
        scorer,
        {arg: spec(helper) for arg, helper in models.items()},
        batch_size,
        cache,
        trained_folder,
        api_key_is_set,
    )
    try:
        frame, counters = score_or_skip(test, metric, identity, load, ScoreCache(cache), batch_size)
    except RequestsExhausted as error:
        raise RequestsExhausted(f"metric {metric}: {error}") from None
    write_counters(counters_out, counters, f"{domain}/{metric}/{shard}")
    write_table(out, frame, schemas.METRIC_SCORES)


def make_table3(
    scores: Sequence[str],
    benchmark: str,
    human_choices: Sequence[str],
    human_row: Sequence[str],
    csv: str,
    markdown: str,
    latex: str,
    test_split: Sequence[str],
    breakdown: str,
    comparisons: Sequence[str],
    plot: str,
    metrics: dict[str, Any],
    domains: Sequence[str],
    annotated_only: Sequence[str],
    bootstrap_samples: int,
    seed: int,
    sample: Sequence[str],
) -> None:
    """Table 3, its plot, pairwise accuracy with CIs per metric, domain, knob, T2I model and subcategory, and
    every two metrics compared on Table 3's pairs (`comparisons`: CSV, Markdown).

    With human choices, Table 3 is computed on the annotated pairs, as in the paper ("All reported values in
    Table 3 are computed on the same annotated human-reference subset"), and the whole test split gets a second
    table of accuracy (`test_split`: its CSV, Markdown and LaTeX). Without, Table 3's files hold the whole test
    split's accuracy under a title that says so and that κ needs human labels. A metric of `annotated_only`
    (scored on the annotated pairs only) is in the whole-split table on the pairs it was scored on, its label
    saying how many, and the caption why. On a sample of a released dataset (`sample`: its import's counters)
    every table's CSV rows, caption and the plot's title say how many pairs of how many."""
    from blindspot.protobias import accuracy, table3
    from blindspot.sampling import read_sample, sample_label

    if bool(human_choices) != bool(test_split):
        raise ValueError("make_table3: the whole-split table (test_split) comes with human choices, and only then")
    all_scores = accuracy.read_scores(scores)
    title = table3.write_report(
        all_scores,
        read_table(benchmark, schemas.BENCHMARK_PAIRS),
        accuracy.read_human_choices(human_choices[0]) if human_choices else None,
        json.loads(Path(human_row[0]).read_text()) if human_row and human_choices else None,
        metrics,
        domains,
        annotated_only,
        (csv, markdown, latex),
        test_split,
        breakdown,
        plot,
        {"n_boot": bootstrap_samples, "seed": seed},
        sample_label(read_sample(sample), "pairs"),
        comparisons,
    )
    log.info("Table 3 over %d scored rows of %d metrics; %s", len(all_scores), len(metrics), title)


def make_report_items(
    benchmark: str,
    scores: Sequence[str],
    counters: Sequence[str],
    grid: str,
    csv: str,
    labels: dict[str, str],
    examples_per_domain: int,
) -> None:
    """The report's example grid (Figure 3) and the table of every stage's counters."""
    from blindspot.protobias.accuracy import read_scores
    from blindspot.protobias.figures import example_grid, example_pairs, stage_counters

    examples = example_pairs(read_table(benchmark, schemas.BENCHMARK_PAIRS), examples_per_domain)
    example_grid(examples, read_scores(scores), labels, grid)
    write_text(csv, stage_counters(counters).to_csv(index=False))


def write_protobias_records(scores: Sequence[str], benchmark: str, out: str) -> None:
    """Each test pair every metric scored, with its prompt, images, scores and Table 3's decision, as JSON
    lines (`protobias.records`)."""
    from blindspot.protobias.accuracy import read_scores
    from blindspot.protobias.records import pair_records

    records = pair_records(read_scores(scores), read_table(benchmark, schemas.BENCHMARK_PAIRS))
    write_records(out, records, schemas.PROTOBIAS_RECORDS)
    log.info("%d ProtoBias records", len(records))
