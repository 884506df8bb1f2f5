# Human annotation: projects for the annotation subsets (Label Studio and the built-in page), and,
# once people's labels are given in config, the agreement statistics and Table 3's human reference.


rule make_annotation_projects:
    input:
        filter_validation=P("filter_validation"),
        preference_pairs=P("preference_pairs"),
        scene_candidates=humble_input("scene_questions"),
        human_study=humble_input("human_study"),
        # The VLM filter's template: its rubric is what the filter evaluators are shown.
        judge_template=config["image_stage"]["judge_template"],
    output:
        out=directory(P("annotation_projects")),
    params:
        # What the projects are made from; people's labels coming in later do not remake them.
        annotators=ANNOTATION["annotators"],
        # The filter validation images go to these only: the paper's "trained human evaluator".
        filter_evaluators=ANNOTATION["filter_evaluators"],
        # HumbleBench's human study (Table 7): each answers their own question set
        study_annotators=(config["humblebench"].get("human_study") or {}).get("annotators", []),
        image_url_prefix=ANNOTATION["image_url_prefix"],
    log:
        LOG("make_annotation_projects"),
    threads: get_threads("make_annotation_projects")
    resources:
        **get_resources("make_annotation_projects"),
    conda:
        get_env("make_annotation_projects")
    script:
        "../scripts/run_stage.py"


rule validate_filter:
    input:
        filter_validation=P("filter_validation"),
        labels=ANNOTATION.get("image_score_labels") or [],
    output:
        csv=report(P("filter_agreement", ext="csv"), caption="../report/agreement.rst", category="Human studies"),
        markdown=P("filter_agreement", ext="md"),
        latex=P("filter_agreement", ext="tex"),
    params:
        evaluators=ANNOTATION["filter_evaluators"],
        threshold=ANNOTATION["human_keep_threshold"],
    log:
        LOG("validate_filter"),
    threads: get_threads("validate_filter")
    resources:
        **get_resources("validate_filter"),
    conda:
        get_env("validate_filter")
    script:
        "../scripts/run_stage.py"


rule human_preferences:
    input:
        preference_pairs=P("preference_pairs"),
        labels=ANNOTATION.get("pairwise_labels") or [],
    output:
        majority=P("human_majority"),
        human_row=P("human_row"),
        csv=report(P("annotator_agreement", ext="csv"), caption="../report/agreement.rst", category="Human studies"),
        markdown=P("annotator_agreement", ext="md"),
        latex=P("annotator_agreement", ext="tex"),
    log:
        LOG("human_preferences"),
    threads: get_threads("human_preferences")
    resources:
        **get_resources("human_preferences"),
    conda:
        get_env("human_preferences")
    script:
        "../scripts/run_stage.py"
