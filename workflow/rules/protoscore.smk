# ProtoScore: train the pairwise scorer on the train split (one GPU job that resumes after a kill),
# then score an external pairwise set with it. Its Table 3 row comes from score_metric.


rule train_protoscore:
    input:
        benchmark=P("benchmark_pairs"),
        model=get_model_input(config["protoscore"]["model"]),
    output:
        out=directory(P("protoscore")),
    params:
        # Not an output: Snakemake would delete it when a job fails, and resuming needs it.
        checkpoint=P("protoscore_checkpoint"),
        protoscore=config["protoscore"],
        model=config["models"][config["protoscore"]["model"]],
        seed=config["seed"],
    log:
        LOG("train_protoscore"),
    benchmark:
        BENCH("train_protoscore")
    threads: get_threads("train_protoscore")
    resources:
        **get_resources("train_protoscore"),
    conda:
        get_env("train_protoscore")
    script:
        "../scripts/run_stage.py"


rule score_transfer:
    input:
        transfer=config["protoscore"].get("transfer") or [],
        trained=P("protoscore"),
    output:
        out=P("protoscore_transfer"),
    log:
        LOG("score_transfer"),
    benchmark:
        BENCH("score_transfer")
    threads: get_threads("score_transfer")
    resources:
        **get_resources("score_transfer"),
    conda:
        get_env("score_transfer")
    script:
        "../scripts/run_stage.py"
