"""Every output path of the workflow, and the lists of targets the rules ask for.

The rules take their paths from here, so a path is spelled once; the functions are plain Python
and unit-tested, which keeps `common.smk` short.
"""

from __future__ import annotations

import itertools
from typing import Any

from blindspot.registry import is_api_metric
from blindspot.shards import shard_names

PATHS = {
    "model": "{resources}/models/{model}",
    "seeds": "{results}/{domain}/seeds.parquet",
    "raw_triplets": "{results}/{domain}/triplets/raw/{generator}/{shard}.parquet",
    "raw_counters": "{results}/{domain}/triplets/raw/{generator}/{shard}.counters.json",
    "judgments": "{results}/{domain}/triplets/judged/{judge}/{generator}/{shard}.parquet",
    "judgment_counters": "{results}/{domain}/triplets/judged/{judge}/{generator}/{shard}.counters.json",
    "triplets": "{results}/{domain}/triplets.parquet",
    "triplet_counters": "{results}/{domain}/triplets.counters.json",
    "prompt_quality": "{results}/{domain}/prompt_quality.parquet",
    "table1": "{results}/tables/table1_prompt_quality.{ext}",
    "images": "{results}/{domain}/images/{t2i}",
    "renders": "{results}/{domain}/renders/{t2i}/{shard}.parquet",
    "render_counters": "{results}/{domain}/renders/{t2i}/{shard}.counters.json",
    "vlm_scores": "{results}/{domain}/vlm_scores/{t2i}/{vlm}/{shard}.parquet",
    "vlm_score_counters": "{results}/{domain}/vlm_scores/{t2i}/{vlm}/{shard}.counters.json",
    "vlm_score_journal": "{results}/{domain}/vlm_scores/{t2i}/{vlm}/{shard}.journal.jsonl",
    "pairs": "{results}/{domain}/pairs.parquet",
    "pair_counters": "{results}/{domain}/pairs.counters.json",
    "image_quality": "{results}/{domain}/image_quality/{shard}.parquet",
    "image_quality_journals": "{results}/{domain}/image_quality/{shard}.journals",
    "table2": "{results}/tables/table2_image_quality.{ext}",
    "benchmark_pairs": "{results}/benchmark/pairs.parquet",
    "filter_validation": "{results}/benchmark/annotation/filter_validation.parquet",
    "preference_pairs": "{results}/benchmark/annotation/preference_pairs.parquet",
    "split_counters": "{results}/benchmark/split.counters.json",
    "dataset": "{results}/benchmark/dataset",
    "imported_pairs": "{results}/imported/{domain}/pairs.parquet",
    "imported_triplets": "{results}/imported/{domain}/triplets.parquet",
    "imported_seeds": "{results}/imported/{domain}/seeds.parquet",
    "imported_benchmark_pairs": "{results}/imported/benchmark_pairs.parquet",
    "imported_images": "{results}/imported/images",
    "imported_counters": "{results}/imported/import.counters.json",
    "metric_scores": "{results}/{domain}/metric_scores/{metric}/{shard}.parquet",
    "metric_score_counters": "{results}/{domain}/metric_scores/{metric}/{shard}.counters.json",
    "metric_cache": "{results}/metric_cache/{metric}",
    "table3": "{results}/tables/table3_metrics.{ext}",
    "table3_test_split": "{results}/tables/table3_test_split.{ext}",
    "metric_breakdown": "{results}/tables/metric_accuracy_breakdown.csv",
    "metric_comparisons": "{results}/tables/metric_comparisons.{ext}",
    "accuracy_plot": "{results}/tables/metric_accuracy.png",
    "protobias_records": "{results}/tables/protobias_records.jsonl",
    "item_view": "{results}/view",
    "scene_questions": "{results}/humblebench/scene_graph_candidates.parquet",
    "scene_verification": "{results}/humblebench/scene_graph_verification.csv",
    "scene_counters": "{results}/humblebench/scene_graph_candidates.counters.json",
    "scene_cues_journal": "{results}/humblebench/scene_graph_cues.journal.jsonl",
    "humble_questions": "{results}/humblebench/questions.parquet",
    "humble_images": "{results}/humblebench/release_images",
    "humble_question_counters": "{results}/humblebench/questions.counters.json",
    "humble_answers": "{results}/humblebench/answers/{vlm}/{shard}.parquet",
    "humble_answer_counters": "{results}/humblebench/answers/{vlm}/{shard}.counters.json",
    "humble_answer_journal": "{results}/humblebench/answers/{vlm}/{shard}.journal.jsonl",
    "humble_api_cache": "{results}/humblebench/api_cache/{vlm}",
    "human_study": "{results}/humblebench/human_study.parquet",
    "humble_metrics": "{results}/tables/humblebench_metrics.csv",
    "humble_comparisons": "{results}/tables/humblebench_comparisons.{ext}",
    "humble_records": "{results}/tables/humblebench_records.jsonl",
    "table4": "{results}/tables/table4_humblebench_original.{ext}",
    "table5": "{results}/tables/table5_humblebench_settings.{ext}",
    "table6": "{results}/tables/table6_humblebench_models.{ext}",
    "table7": "{results}/tables/table7_humblebench_humans.{ext}",
    "table_a1": "{results}/tables/tableA1_humblebench_cautious.{ext}",
    "table_a2": "{results}/tables/tableA2_humblebench_intervals.{ext}",
    "nota_plot": "{results}/tables/humblebench_nota_tradeoff.png",
    "figure2": "{results}/tables/figure2_humblebench_distributions.{ext}",
    "figure2_plot": "{results}/tables/figure2_humblebench_distributions.png",
    "table9": "{results}/tables/table9_humblebench_filtering.{ext}",
    "annotation_projects": "{results}/annotation_projects",
    "filter_agreement": "{results}/tables/filter_validation_agreement.{ext}",
    "annotator_agreement": "{results}/tables/annotator_agreement.{ext}",
    "human_majority": "{results}/benchmark/annotation/human_majority.csv",
    "human_row": "{results}/benchmark/annotation/human_row.json",
    "dataset_card": "{results}/benchmark/dataset_card.md",
    "example_grid": "{results}/tables/example_grid.png",
    "stage_counters": "{results}/tables/stage_counters.csv",
    "protoscore": "{results}/protoscore/trained",
    "protoscore_checkpoint": "{results}/protoscore/checkpoint",
    "protoscore_transfer": "{results}/tables/protoscore_transfer.csv",
    "log": "{results}/logs/{rule}/{job}.log",
    "benchmark": "{results}/benchmarks/{rule}/{job}.tsv",
}
TABLE_FORMATS = ("csv", "md", "tex")


class _Keep(dict):
    """Leaves unknown fields as `{name}`, so a path can be filled in part and stay a pattern."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def path(config: dict[str, Any], kind: str, **fields: str) -> str:
    """The path of `kind`; fields not given stay as Snakemake wildcards."""
    base = {"results": config["results_dir"], "resources": config["resources_dir"]}
    return PATHS[kind].format_map(_Keep(base | fields))


def domain_shards(config: dict[str, Any], domain: str) -> list[str]:
    return shard_names(config["domains"][domain]["n_seeds"], config["shard_size"])


def shard_targets(config: dict[str, Any], kind: str, domain: str, **models: list[str]) -> list[str]:
    """Every shard's path of `kind` in `domain`, for each combination of the named model lists."""
    names = list(models)
    return [
        path(config, kind, domain=domain, shard=shard, **dict(zip(names, combination, strict=True)))
        for combination in itertools.product(*models.values())
        for shard in domain_shards(config, domain)
    ]


def raw_triplet_targets(config: dict[str, Any], domain: str) -> list[str]:
    return shard_targets(config, "raw_triplets", domain, generator=config["prompt_stage"]["generators"])


def judgment_targets(config: dict[str, Any], domain: str) -> list[str]:
    stage = config["prompt_stage"]
    return shard_targets(config, "judgments", domain, judge=stage["judges"], generator=stage["generators"])


def render_targets(config: dict[str, Any], domain: str) -> list[str]:
    return shard_targets(config, "renders", domain, t2i=config["image_stage"]["t2i_models"])


def vlm_score_targets(config: dict[str, Any], domain: str) -> list[str]:
    stage = config["image_stage"]
    return shard_targets(config, "vlm_scores", domain, t2i=stage["t2i_models"], vlm=stage["vlms"])


def earlier_filter_vlms(config: dict[str, Any], vlm: str) -> list[str]:
    """The filter VLMs whose scores `vlm` waits for and scores only what they passed: those before it in
    `image_stage.vlms` when the filter runs in order (`filter_order: sequential`), else none."""
    stage = config["image_stage"]
    if stage.get("filter_order", "sequential") == "every":
        return []
    return stage["vlms"][: stage["vlms"].index(vlm)]


def earlier_vlm_score_targets(config: dict[str, Any], wildcards: dict[str, str]) -> list[str]:
    """The earlier filter VLMs' scores of one render shard (`earlier_filter_vlms`)."""
    where = {name: wildcards[name] for name in ("domain", "t2i", "shard")}
    return [path(config, "vlm_scores", vlm=vlm, **where) for vlm in earlier_filter_vlms(config, wildcards["vlm"])]


def metric_score_targets(config: dict[str, Any]) -> list[str]:
    metrics = list(config["evaluation"]["metrics"])
    return [
        target
        for domain in config["domains"]
        for target in shard_targets(config, "metric_scores", domain, metric=metrics)
    ]


def image_quality_targets(config: dict[str, Any]) -> list[str]:
    return [target for domain in config["domains"] for target in shard_targets(config, "image_quality", domain)]


def table_targets(config: dict[str, Any], kind: str) -> list[str]:
    return [path(config, kind, ext=ext) for ext in TABLE_FORMATS]


def humble_answer_targets(config: dict[str, Any]) -> list[str]:
    """Every answer shard: each VLM's, in every setting it answers (`registry.vlm_settings`)."""
    humble = config["humblebench"]
    return [
        path(config, "humble_answers", vlm=vlm, shard=shard)
        for vlm in humble["vlms"]
        for shard in shard_names(humble["answer_shards"], 1)
    ]


def humble_table_targets(config: dict[str, Any]) -> list[str]:
    """HumbleBench's tables: 4 to 6 and the appendix's intervals always, 7 only with human answers, the
    appendix's Original -> Cautious table only with a `cautious` setting named; Figure 2's numbers and its plot
    always, Table 9 only with scene-graph questions (the release has no record of its filtering)."""
    humble = config["humblebench"]
    kinds = ["table4", "table5", "table6", "table_a2"] + (["table7"] if humble.get("human_answers") else [])
    kinds += ["table_a1"] if humble["tables"].get("cautious") else []
    kinds += ["figure2"] + (["table9"] if humble.get("scene_graphs") else [])
    return [target for kind in kinds for target in table_targets(config, kind)] + [path(config, "figure2_plot")]


def has_human_choices(config: dict[str, Any]) -> bool:
    """Whether Table 3 has a human majority per pair (people's pairwise labels, or a CSV of it): then it is
    computed on the annotated pairs, and the whole test split gets its own table."""
    return bool(config["annotation"].get("pairwise_labels") or config["evaluation"].get("human_choices"))


# Which test pairs an API metric's jobs score (`evaluation.api_metrics_score`): the annotated pairs that
# Table 3 reads (the preference subset `split_benchmark` draws), or the whole test split.
ANNOTATED, TEST_SPLIT = "annotated", "test_split"


def scores_annotated_only(config: dict[str, Any], metric: str) -> bool:
    """Whether `metric`'s jobs score only the annotated test pairs: an API metric, unless the config asks for
    the whole test split (`evaluation.api_metrics_score: test_split`) or scores a released dataset
    (`dataset:`), which has no annotated subset. Every other metric scores the whole test split."""
    wanted = config["evaluation"].get("api_metrics_score", ANNOTATED)
    return wanted == ANNOTATED and "dataset" not in config and is_api_metric(config, metric)


def annotated_only_metrics(config: dict[str, Any]) -> list[str]:
    """The metrics scored on the annotated test pairs only, in config order (`scores_annotated_only`)."""
    return [name for name in config["evaluation"]["metrics"] if scores_annotated_only(config, name)]


def final_targets(config: dict[str, Any]) -> list[str]:
    """What `rule all` builds: the exported dataset, the annotation subsets, Tables 1 to 3 (and Table 3's
    whole-split companion when there are human choices) and the metrics' accuracy breakdown and plot,
    HumbleBench's tables, metrics and plot, both benchmarks' per-item records and their viewer, ProtoScore's
    transfer accuracy when an external pairwise set is given, and the annotation projects and agreement tables."""
    if "dataset" in config:
        return released_targets(config)
    benchmark = [path(config, kind) for kind in ("dataset", "filter_validation", "preference_pairs")]
    table_kinds = ["table1", "table2", "table3"] + (["table3_test_split"] if has_human_choices(config) else [])
    tables = [target for kind in table_kinds for target in table_targets(config, kind)]
    figures = [
        path(config, kind)
        for kind in (
            "metric_breakdown",
            "accuracy_plot",
            "humble_metrics",
            "nota_plot",
            "example_grid",
            "stage_counters",
        )
    ]
    figures += [*record_targets(config), path(config, "item_view")]
    transfer = [path(config, "protoscore_transfer")] if config["protoscore"].get("transfer") else []
    return benchmark + tables + humble_table_targets(config) + figures + transfer + annotation_targets(config)


def released_targets(config: dict[str, Any]) -> list[str]:
    """What `rule all` builds with `dataset:`, where nothing is built: Table 3 (and its whole-split companion
    with human choices), the breakdown, plot and per-item records of the dataset's pairs when `dataset.path`
    is given, HumbleBench's tables, metrics, plot and per-item records when `humblebench.release` is, and the
    records' viewer."""
    found = []
    if config["dataset"].get("path"):
        kinds = ["table3"] + (["table3_test_split"] if has_human_choices(config) else [])
        found += [target for kind in kinds for target in table_targets(config, kind)]
        found += [path(config, kind) for kind in ("metric_breakdown", "accuracy_plot")]
    if config["humblebench"].get("release"):
        found += humble_table_targets(config)
        found += [path(config, kind) for kind in ("humble_metrics", "nota_plot")]
    records = record_targets(config)
    return found + records + ([path(config, "item_view")] if records else [])


def record_targets(config: dict[str, Any]) -> list[str]:
    """The per-item records the run writes: ProtoBias' pairs (unless a released dataset is only for HumbleBench)
    and HumbleBench's answers (unless a released dataset is only for ProtoBias)."""
    released = config.get("dataset")
    kinds = []
    if released is None or released.get("path"):
        kinds.append("protobias_records")
    if released is None or config["humblebench"].get("release"):
        kinds.append("humble_records")
    return [path(config, kind) for kind in kinds]


def counter_targets(config: dict[str, Any]) -> list[str]:
    """Every stage's counters, which say what it kept and dropped and why: each shard's, each domain's,
    the benchmark's, and HumbleBench's."""
    stage, image, humble = config["prompt_stage"], config["image_stage"], config["humblebench"]
    metrics = list(config["evaluation"]["metrics"])
    found = []
    for domain in config["domains"]:
        found += shard_targets(config, "raw_counters", domain, generator=stage["generators"])
        found += shard_targets(
            config, "judgment_counters", domain, judge=stage["judges"], generator=stage["generators"]
        )
        found.append(path(config, "triplet_counters", domain=domain))
        found += shard_targets(config, "render_counters", domain, t2i=image["t2i_models"])
        found += shard_targets(config, "vlm_score_counters", domain, t2i=image["t2i_models"], vlm=image["vlms"])
        found.append(path(config, "pair_counters", domain=domain))
        found += shard_targets(config, "metric_score_counters", domain, metric=metrics)
    found.append(path(config, "split_counters"))
    if humble.get("scene_graphs"):
        found.append(path(config, "scene_counters"))
    found.append(path(config, "humble_question_counters"))
    found += [
        path(config, "humble_answer_counters", vlm=vlm, shard=shard)
        for vlm in humble["vlms"]
        for shard in shard_names(humble["answer_shards"], 1)
    ]
    return found


def annotation_targets(config: dict[str, Any]) -> list[str]:
    """The annotation projects, and the agreement tables of the labels the config names."""
    labels = config["annotation"]
    found = [path(config, "annotation_projects")]
    if labels.get("image_score_labels"):
        found += table_targets(config, "filter_agreement")
    if labels.get("pairwise_labels"):
        found += table_targets(config, "annotator_agreement")
    return found
