# Scoring T2I metrics on the test split: one job per metric x domain x seed shard, then Table 3.

# score_metric's params, said once: score_api_metric's jobs take these and their planned requests.
SCORE_METRIC_PARAMS = dict(
    cache=lambda wildcards: P("metric_cache", metric=wildcards.metric),
    # The metric's entry and its models' are params, so editing any re-runs its jobs.
    metric_entry=lambda wildcards: METRICS[wildcards.metric],
    model=get_metric_model_spec,
    # Helper models by the plug-in argument that takes them (AlignScore's captioner).
    models=lambda wildcards: {
        arg: model_spec_params(name) for arg, name in METRICS[wildcards.metric].get("models", {}).items()
    },
    # What the score cache knows the models by: the registry settings that change a score.
    score_settings=lambda wildcards: metric_score_settings(config["models"], METRICS[wildcards.metric]),
    # The plug-in's code by its version, so a new version re-runs the jobs and scores again.
    plugin_code=lambda wildcards: metric_plugin_code(wildcards.metric),
    api_key_is_set=get_api_key_is_set,
    # The test split is a function of the seed id and these (as in split_benchmark); an imported
    # dataset's tables hold only its own test pairs, all of them scored.
    split=dict(seed=config["seed"], test_fraction=1.0 if "dataset" in config else config["benchmark"]["test_fraction"]),
    batch_size=config["evaluation"]["batch_size"],
    shard_size=config["shard_size"],
)


rule score_metric:
    wildcard_constraints:
        metric=_one_of(set(METRICS) - set(API_METRICS)),
    input:
        pairs=scored("pairs"),
        triplets=scored("triplets"),
        seeds=scored("seeds"),
        built_models=lambda wildcards: [
            path for name in metric_models(METRICS[wildcards.metric]) for path in get_model_input(name)
        ],
        template=get_metric_template,
        # A trained metric (ProtoScore) scores with the workflow's own training output.
        trained=lambda wildcards: trained_metric_input(config, wildcards.metric),
        # An API metric's jobs score only these test pairs (evaluation.api_metrics_score).
        annotated=get_annotated_pairs,
    output:
        out=P("metric_scores"),
        counters_out=P("metric_score_counters"),
    params:
        **SCORE_METRIC_PARAMS,
    log:
        LOG("score_metric"),
    benchmark:
        BENCH("score_metric")
    threads: get_threads("score_metric")
    resources:
        **get_resources("score_metric"),
    conda:
        get_env("score_metric")
    script:
        "../scripts/run_stage.py"


# An API judge's jobs: the same step, on the submit host (a local rule), where the network is.
use rule score_metric as score_api_metric with:
    wildcard_constraints:
        metric=_one_of(API_METRICS),
    params:
        **SCORE_METRIC_PARAMS,
        # Its client sends no more than these times client.max_attempts (`blindspot.bill`).
        planned_requests=lambda wildcards: bill.job_requests(config, dict(wildcards.items())),
    log:
        LOG("score_api_metric"),
    benchmark:
        BENCH("score_api_metric")
    threads: get_threads("score_api_metric")
    resources:
        **get_resources("score_api_metric"),


rule make_table3:
    input:
        scores=targets.metric_score_targets(config),
        benchmark=scored("benchmark_pairs"),
        human_choices=get_human_choices,
        human_row=[P("human_row")] if ANNOTATION.get("pairwise_labels") else [],
        # On a sample of a released dataset (`dataset.limit`) its counters, so the tables say how many of how many.
        sample=[P("imported_counters")] if DATASET.get("limit") else [],
    output:
        csv=report(P("table3", ext="csv"), caption="../report/table3.rst", category="Metrics"),
        markdown=P("table3", ext="md"),
        latex=P("table3", ext="tex"),
        # With human choices Table 3 is on the annotated pairs (as in the paper) and the whole test split gets
        # this second table; without, Table 3's files hold the whole test split, titled so.
        test_split=[
            report(P("table3_test_split", ext="csv"), caption="../report/table3_test_split.rst", category="Metrics"),
            P("table3_test_split", ext="md"),
            P("table3_test_split", ext="tex"),
        ]
        if targets.has_human_choices(config)
        else [],
        breakdown=P("metric_breakdown"),
        # every two metrics compared on Table 3's pairs: paired intervals, McNemar's test, Holm's correction
        comparisons=[P("metric_comparisons", ext=ext) for ext in ("csv", "md")],
        plot=report(P("accuracy_plot"), caption="../report/table3.rst", category="Metrics"),
    params:
        # Each metric's Table 3 label and family title, in config order.
        metrics={
            name: {"label": entry["label"], "family": config["evaluation"]["families"][entry["family"]]}
            for name, entry in METRICS.items()
        },
        domains=list(config["domains"]),
        # Metrics scored on the annotated pairs only: the whole-split table shows them on those pairs, marked.
        annotated_only=ANNOTATED_ONLY,
        bootstrap_samples=config["evaluation"]["bootstrap_samples"],
        seed=config["seed"],
    log:
        LOG("make_table3"),
    threads: get_threads("make_table3")
    resources:
        **get_resources("make_table3"),
    conda:
        get_env("make_table3")
    script:
        "../scripts/run_stage.py"


rule make_report_items:
    input:
        benchmark=P("benchmark_pairs"),
        scores=targets.metric_score_targets(config),
        counters=targets.counter_targets(config),
    output:
        grid=report(P("example_grid"), caption="../report/example_grid.rst", category="Benchmark"),
        csv=report(P("stage_counters"), caption="../report/stage_counters.rst", category="Benchmark"),
    params:
        labels={name: entry["label"] for name, entry in METRICS.items()},
        examples_per_domain=config["report"]["examples_per_domain"],
    log:
        LOG("make_report_items"),
    threads: get_threads("make_report_items")
    resources:
        **get_resources("make_report_items"),
    conda:
        get_env("make_report_items")
    script:
        "../scripts/run_stage.py"


# Each scored test pair as a JSON line: what a metric did per item, to read (`blindspot evaluate --show`) or diff.
rule write_protobias_records:
    input:
        scores=targets.metric_score_targets(config),
        benchmark=scored("benchmark_pairs"),
    output:
        out=P("protobias_records"),
    log:
        LOG("write_protobias_records"),
    threads: get_threads("write_protobias_records")
    resources:
        **get_resources("write_protobias_records"),
    conda:
        get_env("write_protobias_records")
    script:
        "../scripts/run_stage.py"
