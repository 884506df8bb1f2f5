# HumbleBench: questions (official release, our benchmark's images, scene graphs), answers per
# VLM x setting x shard, then Tables 4 to 7 and the NOTA plot.


rule write_scene_questions:
    input:
        scene_graphs=SCENE_GRAPHS.get("file", []),
        template=SCENE_GRAPHS.get("template", []),
        models=[path for role in ("describer", "writer") if role in SCENE_GRAPHS for path in get_model_input(SCENE_GRAPHS[role])],
    output:
        out=P("scene_questions"),
        verification_out=P("scene_verification"),
        counters_out=P("scene_counters"),
    params:
        # Everything but the people's verification file, which only make_humble_questions reads.
        scene_graphs={key: value for key, value in SCENE_GRAPHS.items() if key != "verification"},
    log:
        LOG("write_scene_questions"),
    benchmark:
        BENCH("write_scene_questions")
    threads: get_threads("write_scene_questions")
    resources:
        **get_resources("write_scene_questions"),
    conda:
        get_env("write_scene_questions")
    script:
        "../scripts/run_stage.py"


rule make_humble_questions:
    input:
        benchmark=humble_input("benchmark"),
        scene_candidates=humble_input("scene_questions"),
        # a list, empty or of one file, as the step reads it
        verification=[SCENE_GRAPHS["verification"]] if SCENE_GRAPHS.get("verification") else [],
        release=get_release_input(),
    output:
        out=P("humble_questions"),
        images=directory(P("humble_images")),
        counters_out=P("humble_question_counters"),
    params:
        release=config["humblebench"].get("release"),
        from_benchmark=config["humblebench"].get("from_benchmark"),
        seed=config["seed"],
    log:
        LOG("make_humble_questions"),
    benchmark:
        BENCH("make_humble_questions")
    threads: get_threads("make_humble_questions")
    resources:
        **get_resources("make_humble_questions"),
    conda:
        get_env("make_humble_questions")
    script:
        "../scripts/run_stage.py"


rule answer_humble:
    input:
        questions=P("humble_questions"),
        templates=lambda wildcards: [config["humblebench"]["settings"][wildcards.setting]["template"]],
        model=get_role_model_input("vlm"),
    output:
        out=P("humble_answers"),
        counters_out=P("humble_answer_counters"),
    params:
        # The setting's and the model's entries are params, so editing either re-runs their jobs.
        setting_entry=lambda wildcards: config["humblebench"]["settings"][wildcards.setting],
        vlm_entry=lambda wildcards: config["models"][wildcards.vlm],
        answering={key: config["humblebench"][key] for key in ("answer_shards", "max_new_tokens")},
        seed=config["seed"],
    log:
        LOG("answer_humble"),
    benchmark:
        BENCH("answer_humble")
    threads: get_threads("answer_humble")
    resources:
        **get_resources("answer_humble"),
    conda:
        get_env("answer_humble")
    script:
        "../scripts/run_stage.py"


rule make_humble_tables:
    input:
        answers=targets.humble_answer_targets(config),
        human_answers=humble_input("human_answers"),
    output:
        metrics=P("humble_metrics"),
        table4=humble_tables("table4"),
        table5=humble_tables("table5"),
        table6=humble_tables("table6"),
        table7=targets.table_targets(config, "table7") if config["humblebench"].get("human_answers") else [],
        plot=report(P("nota_plot"), caption="../report/humblebench.rst", category="HumbleBench"),
    params:
        humblebench=config["humblebench"],
    log:
        LOG("make_humble_tables"),
    threads: get_threads("make_humble_tables")
    resources:
        **get_resources("make_humble_tables"),
    conda:
        get_env("make_humble_tables")
    script:
        "../scripts/run_stage.py"
