# A released ProtoBias benchmark instead of a built one (`dataset:`): its test pairs become the tables the
# scoring rules read, and nothing is built (the Snakefile leaves the building rules out).

rule import_dataset:
    input:
        source_copy=get_dataset_input(),
    output:
        pairs=expand(P("imported_pairs"), domain=config["domains"]),
        triplets=expand(P("imported_triplets"), domain=config["domains"]),
        seeds=expand(P("imported_seeds"), domain=config["domains"]),
        benchmark=P("imported_benchmark_pairs"),
        images=directory(P("imported_images")),
        counters_out=P("imported_counters"),
    params:
        # a hub id, or the local copy's path
        source=DATASET.get("path"),
        columns=DATASET.get("columns", {}),
        # the test pairs everyone samples, when set (`blindspot.sampling`): a new limit re-imports and re-scores
        limit=DATASET.get("limit"),
        # each domain's seeds, which set its shards, in the order of the per-domain outputs
        n_seeds={name: entry["n_seeds"] for name, entry in config["domains"].items()},
    log:
        LOG("import_dataset"),
    benchmark:
        BENCH("import_dataset")
    threads: get_threads("import_dataset")
    resources:
        **get_resources("import_dataset"),
    conda:
        get_env("import_dataset")
    script:
        "../scripts/run_stage.py"
