# The benchmark: train/test split, annotation subsets, and the Hugging Face dataset export.


rule split_benchmark:
    input:
        pairs=expand(P("pairs"), domain=config["domains"]),
        triplets=expand(P("triplets"), domain=config["domains"]),
    output:
        out=P("benchmark_pairs"),
        filter_validation=P("filter_validation"),
        preference_pairs=P("preference_pairs"),
        counters_out=P("split_counters"),
    params:
        domains=list(config["domains"]),
        # the filter validation is drawn from the images every filter VLM scored
        vlms=config["image_stage"]["vlms"],
        test_fraction=config["benchmark"]["test_fraction"],
        threshold=config["image_stage"]["consensus_threshold"],
        filter_validation_images=config["benchmark"]["filter_validation_images"],
        preference_pairs_per_domain=config["benchmark"]["preference_pairs_per_domain"],
        seed=config["seed"],
    log:
        LOG("split_benchmark"),
    threads: get_threads("split_benchmark")
    resources:
        **get_resources("split_benchmark"),
    conda:
        get_env("split_benchmark")
    script:
        "../scripts/run_stage.py"


rule export_dataset:
    input:
        benchmark=P("benchmark_pairs"),
    output:
        out=directory(P("dataset")),
        card=report(P("dataset_card"), caption="../report/dataset_card.rst", category="Benchmark"),
    params:
        name=config["benchmark"]["name"],
        run_name=config["run_name"],
        threshold=config["image_stage"]["consensus_threshold"],
        # The dataset card's table of models, by role.
        models={
            role: [model_spec_params(name) for name in names]
            for role, names in (
                ("generator", config["prompt_stage"]["generators"]),
                ("judge", config["prompt_stage"]["judges"]),
                ("text-to-image", config["image_stage"]["t2i_models"]),
                ("image filter", config["image_stage"]["vlms"]),
            )
        },
    log:
        LOG("export_dataset"),
    benchmark:
        BENCH("export_dataset")
    threads: get_threads("export_dataset")
    resources:
        **get_resources("export_dataset"),
    conda:
        get_env("export_dataset")
    script:
        "../scripts/run_stage.py"
