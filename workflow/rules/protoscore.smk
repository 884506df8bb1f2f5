# ProtoScore: train the pairwise scorer on the train split (one GPU job that resumes after a kill),
# then score an external pairwise set with it. Its Table 3 row comes from score_metric.


rule train_protoscore:
    input:
        benchmark=P("benchmark_pairs"),
        built_model=get_model_input(config["protoscore"]["model"]),
    output:
        out=directory(P("protoscore")),
    params:
        # Not an output: Snakemake would delete it when a job fails, and resuming needs it.
        checkpoint=P("protoscore_checkpoint"),
        # The training settings: the section without the model (a param of its own) and the transfer
        # set, which only score_transfer reads (naming another set must not train again).
        settings={key: value for key, value in config["protoscore"].items() if key not in ("model", "transfer")},
        model=model_spec_params(config["protoscore"]["model"]),
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
    params:
        model=model_spec_params(config["protoscore"]["model"]),
        batch_size=config["evaluation"]["batch_size"],
        bootstrap_samples=config["evaluation"]["bootstrap_samples"],
        seed=config["seed"],
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
