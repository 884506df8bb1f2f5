rule build_model:
    """Build a model from its recipe: a tiny real architecture or weights shipped in a package."""
    input:
        lambda wildcards: build_inputs(config, wildcards.model),
    output:
        out=directory(P("model")),
    params:
        recipe=lambda wildcards: resolved_recipe(config, wildcards.model),
        # Only a recipe of random weights reads the seed: a new one rebuilds no real model.
        seed=lambda wildcards: recipe_seed(resolved_recipe(config, wildcards.model), config["seed"]),
    log:
        LOG("build_model"),
    benchmark:
        BENCH("build_model")
    threads: get_threads("build_model")
    resources:
        **get_resources("build_model"),
    conda:
        get_env("build_model")
    script:
        "../scripts/run_stage.py"
