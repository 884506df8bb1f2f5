# The prompt stage: taxonomy -> seeds -> LLM triplets -> LLM judges -> unanimous accept -> Table 1.


rule make_seeds:
    input:
        taxonomy=lambda wildcards: config["domains"][wildcards.domain]["taxonomy"],
    output:
        out=P("seeds"),
    params:
        n_seeds=lambda wildcards: config["domains"][wildcards.domain]["n_seeds"],
        seed=config["seed"],
    log:
        LOG("make_seeds"),
    benchmark:
        BENCH("make_seeds")
    threads: get_threads("make_seeds")
    resources:
        **get_resources("make_seeds"),
    conda:
        get_env("make_seeds")
    script:
        "../scripts/run_stage.py"


rule generate_triplets:
    input:
        seeds=P("seeds"),
        template=STAGE["generate_template"],
        built_model=get_role_model_input("generator"),
    output:
        out=P("raw_triplets"),
        counters_out=P("raw_counters"),
    params:
        model=get_model_spec("generator"),
        shard_size=config["shard_size"],
        batch_size=STAGE["batch_size"],
        seed=config["seed"],
    log:
        LOG("generate_triplets"),
    benchmark:
        BENCH("generate_triplets")
    threads: get_threads("generate_triplets")
    resources:
        **get_resources("generate_triplets"),
    conda:
        get_env("generate_triplets")
    script:
        "../scripts/run_stage.py"


rule judge_triplets:
    input:
        triplets=P("raw_triplets"),
        seeds=P("seeds"),
        template=STAGE["judge_template"],
        built_model=get_role_model_input("judge"),
    output:
        out=P("judgments"),
        counters_out=P("judgment_counters"),
    params:
        model=get_model_spec("judge"),
        batch_size=STAGE["batch_size"],
        seed=config["seed"],
    log:
        LOG("judge_triplets"),
    benchmark:
        BENCH("judge_triplets")
    threads: get_threads("judge_triplets")
    resources:
        **get_resources("judge_triplets"),
    conda:
        get_env("judge_triplets")
    script:
        "../scripts/run_stage.py"


rule accept_triplets:
    input:
        seeds=P("seeds"),
        raw=lambda wildcards: targets.raw_triplet_targets(config, wildcards.domain),
        judgments=lambda wildcards: targets.judgment_targets(config, wildcards.domain),
    output:
        out=P("triplets"),
        counters_out=P("triplet_counters"),
    params:
        judges=STAGE["judges"],
    log:
        LOG("accept_triplets"),
    threads: get_threads("accept_triplets")
    resources:
        **get_resources("accept_triplets"),
    conda:
        get_env("accept_triplets")
    script:
        "../scripts/run_stage.py"


rule check_prompt_quality:
    input:
        triplets=P("triplets"),
        built_models=[*get_model_input(STAGE["embedding_model"]), *get_model_input(STAGE["nli_model"])],
    output:
        out=P("prompt_quality"),
    params:
        embedding_model=model_spec_params(STAGE["embedding_model"]),
        nli_model=model_spec_params(STAGE["nli_model"]),
        batch_size=STAGE["batch_size"],
    log:
        LOG("check_prompt_quality"),
    benchmark:
        BENCH("check_prompt_quality")
    threads: get_threads("check_prompt_quality")
    resources:
        **get_resources("check_prompt_quality"),
    conda:
        get_env("check_prompt_quality")
    script:
        "../scripts/run_stage.py"


rule make_table1:
    input:
        quality=expand(P("prompt_quality"), domain=config["domains"]),
    output:
        csv=report(P("table1", ext="csv"), caption="../report/table1.rst", category="Prompt quality"),
        markdown=P("table1", ext="md"),
        latex=P("table1", ext="tex"),
    log:
        LOG("make_table1"),
    threads: get_threads("make_table1")
    resources:
        **get_resources("make_table1"),
    conda:
        get_env("make_table1")
    script:
        "../scripts/run_stage.py"
