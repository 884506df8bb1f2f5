# The image stage: render each accepted triplet's D_c and D_a with every text-to-image model.


rule render_images:
    input:
        triplets=P("triplets"),
        seeds=P("seeds"),
        built_model=get_role_model_input("t2i"),
    output:
        out=P("renders"),
        counters_out=P("render_counters"),
    params:
        model=get_model_spec("t2i"),
        images_dir=lambda wildcards: P("images", domain=wildcards.domain, t2i=wildcards.t2i),
        images_per_description=config["image_stage"]["images_per_description"],
        seed=config["seed"],
        # The batch's make-up changes the floating-point sums, and so the pixels (blindspot.protobias.render).
        batch_size=config["image_stage"]["render_batch_size"],
        shard_size=config["shard_size"],
    log:
        LOG("render_images"),
    benchmark:
        BENCH("render_images")
    threads: get_threads("render_images")
    resources:
        **get_resources("render_images"),
    conda:
        get_env("render_images")
    script:
        "../scripts/run_stage.py"


rule judge_images:
    input:
        renders=P("renders"),
        # the earlier filter VLMs' scores of the shard: this one scores only the pairs they passed
        earlier=lambda wildcards: targets.earlier_vlm_score_targets(config, dict(wildcards.items())),
        built_model=get_role_model_input("vlm"),
        template=config["image_stage"]["judge_template"],
    output:
        out=P("vlm_scores"),
        counters_out=P("vlm_score_counters"),
    params:
        model=get_model_spec("vlm"),
        earlier_vlms=lambda wildcards: targets.earlier_filter_vlms(config, wildcards.vlm),
        # what decides which images are still open: read by a later VLM's jobs only, so only they run again
        threshold=after_earlier_vlms(config["image_stage"]["consensus_threshold"]),
        score=after_earlier_vlms(config["image_stage"]["consensus_score"]),
        validation_pool=after_earlier_vlms(config["image_stage"].get("validation_pool", 1.0)),
        seed=after_earlier_vlms(config["seed"]),
        batch_size=config["image_stage"]["judge_batch_size"],
        # Not an output: Snakemake would delete it when a job fails, and resuming needs it.
        journal=P("vlm_score_journal"),
    log:
        LOG("judge_images"),
    benchmark:
        BENCH("judge_images")
    threads: get_threads("judge_images")
    resources:
        **get_resources("judge_images"),
    conda:
        get_env("judge_images")
    script:
        "../scripts/run_stage.py"


rule keep_consensus_pairs:
    input:
        renders=lambda wildcards: targets.render_targets(config, wildcards.domain),
        scores=lambda wildcards: targets.vlm_score_targets(config, wildcards.domain),
    output:
        out=P("pairs"),
        counters_out=P("pair_counters"),
    params:
        vlms=config["image_stage"]["vlms"],
        threshold=config["image_stage"]["consensus_threshold"],
        score=config["image_stage"]["consensus_score"],
    log:
        LOG("keep_consensus_pairs"),
    threads: get_threads("keep_consensus_pairs")
    resources:
        **get_resources("keep_consensus_pairs"),
    conda:
        get_env("keep_consensus_pairs")
    script:
        "../scripts/run_stage.py"


rule measure_image_quality:
    input:
        pairs=P("pairs"),
        triplets=P("triplets"),
        seeds=P("seeds"),
        built_models=[get_model_input(name) for name in config["image_stage"]["iqa_metrics"]],
    output:
        out=P("image_quality"),
    params:
        models=[model_spec_params(name) for name in config["image_stage"]["iqa_metrics"]],
        batch_size=config["image_stage"]["iqa_batch_size"],
        shard_size=config["shard_size"],
        # Not an output: Snakemake would delete it when a job fails, and resuming needs it.
        journals=P("image_quality_journals"),
    log:
        LOG("measure_image_quality"),
    benchmark:
        BENCH("measure_image_quality")
    threads: get_threads("measure_image_quality")
    resources:
        **get_resources("measure_image_quality"),
    conda:
        get_env("measure_image_quality")
    script:
        "../scripts/run_stage.py"


rule make_table2:
    input:
        quality=targets.image_quality_targets(config),
    output:
        csv=report(P("table2", ext="csv"), caption="../report/table2.rst", category="Image quality"),
        markdown=P("table2", ext="md"),
        latex=P("table2", ext="tex"),
    log:
        LOG("make_table2"),
    threads: get_threads("make_table2")
    resources:
        **get_resources("make_table2"),
    conda:
        get_env("make_table2")
    script:
        "../scripts/run_stage.py"
