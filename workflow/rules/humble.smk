# HumbleBench: questions (official release, our benchmark's images, scene graphs), answers per
# VLM x shard (every setting the VLM answers, in one job), then Tables 4 to 7 and the NOTA plot.

from blindspot.catalogue import answer_batch
from blindspot.registry import answer_protocol, vlm_settings
from blindspot.humblebench.settings import noise_kind, setting_transforms

HUMBLE = config["humblebench"]
FROM_BENCHMARK = HUMBLE.get("from_benchmark")


rule write_scene_questions:
    input:
        scene_graphs=SCENE_GRAPHS.get("file", []),
        template=SCENE_GRAPHS.get("template", []),
        built_models=[path for role in ("describer", "writer") if role in SCENE_GRAPHS for path in get_model_input(SCENE_GRAPHS[role])],
    output:
        out=P("scene_questions"),
        verification_out=P("scene_verification"),
        counters_out=P("scene_counters"),
    params:
        # Made with the job: the rule runs only when scene graphs are configured.
        describer=lambda wildcards: model_spec_params(SCENE_GRAPHS["describer"]),
        writer=lambda wildcards: model_spec_params(SCENE_GRAPHS["writer"]),
        # a function: Snakemake would read the instruction's {category} as a wildcard
        cue_instruction=lambda wildcards: SCENE_GRAPHS["cue_instruction"],
        cue_tokens=SCENE_GRAPHS.get("cue_tokens"),
        writer_max_tokens=SCENE_GRAPHS.get("writer_max_tokens"),
        batch_size=HUMBLE["batch_size"],
        seed=config["seed"],
        # Not an output: Snakemake would delete it when a job fails, and resuming needs it.
        cues_journal=P("scene_cues_journal"),
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
        # the domains' taxonomies give the benchmark questions' distractors
        taxonomies=[entry["taxonomy"] for entry in config["domains"].values()] if FROM_BENCHMARK else [],
        scene_candidates=humble_input("scene_questions"),
        # a list, empty or of one file, as the step reads it
        verification=[SCENE_GRAPHS["verification"]] if SCENE_GRAPHS.get("verification") else [],
        release_copy=get_release_input(),
    output:
        out=P("humble_questions"),
        images=directory(P("humble_images")),
        counters_out=P("humble_question_counters"),
    params:
        # a hub id, or the local copy's path
        release=HUMBLE.get("release"),
        from_benchmark=FROM_BENCHMARK,
        domains=list(config["domains"]) if FROM_BENCHMARK else [],
        seed=config["seed"],
        # the questions everyone samples, when set (`blindspot.sampling`): a new limit re-runs the answers
        limit=HUMBLE.get("limit"),
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


# answer_humble's params, said once: answer_api_humble's jobs take these, their cache and planned requests.
ANSWER_HUMBLE_PARAMS = dict(
    model=get_model_spec("vlm"),
    # how the VLM is asked (humblebench.protocol and its entry's humble_protocol); its prompt is an input
    protocol=lambda wildcards: answer_protocol(config, wildcards.vlm).params(),
    # the settings the VLM answers (`registry.vlm_settings`), in the order of its templates
    settings=lambda wildcards: {
        name: setting_transforms(HUMBLE["settings"][name]) for name in vlm_settings(config, wildcards.vlm)
    },
    answer_shards=HUMBLE["answer_shards"],
    # questions per call: a vLLM engine's several times its own batch, a transformers model's batch_size
    batch_size=lambda wildcards: answer_batch(config, wildcards.vlm),
    seed=config["seed"],
    # Not an output: Snakemake would delete it when a job fails, and resuming needs it.
    journal=P("humble_answer_journal"),
)


rule answer_humble:
    wildcard_constraints:
        vlm=_one_of(set(HUMBLE["vlms"]) - set(API_VLMS)),
    input:
        questions=P("humble_questions"),
        templates=lambda wildcards: [HUMBLE["settings"][name]["template"] for name in vlm_settings(config, wildcards.vlm)],
        prompt=lambda wildcards: answer_protocol(config, wildcards.vlm).prompt,
        built_model=get_role_model_input("vlm"),
    output:
        out=P("humble_answers"),
        counters_out=P("humble_answer_counters"),
    params:
        **ANSWER_HUMBLE_PARAMS,
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


# An API VLM's answer jobs: the same step, on the submit host (a local rule), where the network is.
use rule answer_humble as answer_api_humble with:
    wildcard_constraints:
        vlm=_one_of(API_VLMS),
    params:
        # A batch is as many questions as its client may have in flight (`blindspot.models.api.vlm`), not
        # humblebench.batch_size, whose change re-runs only the local VLMs' jobs.
        **(ANSWER_HUMBLE_PARAMS | {"batch_size": None}),
        # Its replies, kept so that nothing paid for is asked twice (`blindspot.models.api.vlm`).
        cache=lambda wildcards: P("humble_api_cache", vlm=wildcards.vlm),
        # Its client sends no more than these times client.max_attempts (`blindspot.bill`).
        planned_requests=lambda wildcards: bill.job_requests(config, dict(wildcards.items()), "answer_api_humble"),
        # never the key: setting it later runs the jobs that were skipped without it
        api_key_is_set=get_api_key_is_set,
    log:
        LOG("answer_api_humble"),
    benchmark:
        BENCH("answer_api_humble")
    threads: get_threads("answer_api_humble")
    resources:
        **get_resources("answer_api_humble"),


rule sample_human_questions:
    input:
        questions=P("humble_questions"),
    output:
        out=P("human_study"),
    params:
        study=HUMBLE.get("human_study"),
        original=HUMBLE["tables"]["original"],
        stress=HUMBLE["tables"].get("stress"),
        # how each setting shows a question: what the annotators see, as the models do
        settings={name: setting_transforms(setting) for name, setting in HUMBLE["settings"].items()},
        seed=config["seed"],
    log:
        LOG("sample_human_questions"),
    threads: get_threads("sample_human_questions")
    resources:
        **get_resources("sample_human_questions"),
    conda:
        get_env("sample_human_questions")
    script:
        "../scripts/run_stage.py"


rule make_humble_tables:
    input:
        answers=targets.humble_answer_targets(config),
        # each question's image: the metrics' intervals resample images, each with all of its questions
        questions=P("humble_questions"),
        # a CSV, or the humble_answer project's labels (JSON), checked against the annotators' question sets
        human_answers=humble_input("human_answers"),
        human_study=humble_input("human_study") if HUMBLE.get("human_answers") else [],
        # On a sample of the questions (`humblebench.limit`) their counters, so the tables say how many of how many.
        sample=[P("humble_question_counters")] if HUMBLE.get("limit") else [],
    output:
        metrics=P("humble_metrics"),
        # every two VLMs compared per setting: paired intervals, McNemar's test, Holm's correction
        comparisons=[P("humble_comparisons", ext=ext) for ext in ("csv", "md")],
        table4=humble_tables("table4"),
        table5=humble_tables("table5"),
        table6=humble_tables("table6"),
        table7=targets.table_targets(config, "table7") if config["humblebench"].get("human_answers") else [],
        table_a1=humble_tables("table_a1") if HUMBLE["tables"].get("cautious") else [],
        table_a2=humble_tables("table_a2"),
        plot=report(P("nota_plot"), caption="../report/humblebench.rst", category="HumbleBench"),
    params:
        reading=HUMBLE["reading"],
        # what the tables call each setting, and the metric it is ranked by
        settings={name: {key: setting[key] for key in ("label", "headline")} for name, setting in HUMBLE["settings"].items()},
        original=HUMBLE["tables"]["original"],
        stress=HUMBLE["tables"].get("stress"),
        cautious=HUMBLE["tables"].get("cautious"),
        # The tables read the answers' texts again (`parsed_texts`): a parser change re-runs them.
        parser_version=PARSER_VERSION,
        # Tables 4 and 6 group the VLMs as the paper does, by their registry entries' `group`.
        groups={vlm: config["models"][vlm].get("group") for vlm in HUMBLE["vlms"]},
        bootstrap={"n_boot": config["evaluation"]["bootstrap_samples"], "seed": config["seed"]},
    log:
        LOG("make_humble_tables"),
    threads: get_threads("make_humble_tables")
    resources:
        **get_resources("make_humble_tables"),
    conda:
        get_env("make_humble_tables")
    script:
        "../scripts/run_stage.py"


# Each answer as a JSON line: what a VLM did per question, to read (`blindspot evaluate --show`) or diff.
rule write_humble_records:
    input:
        answers=targets.humble_answer_targets(config),
        questions=P("humble_questions"),
    output:
        out=P("humble_records"),
    params:
        # which reading is the prediction, as the tables take it
        reading=HUMBLE["reading"],
        # The records read the answers' texts again, as the tables do: a parser change re-runs them.
        parser_version=PARSER_VERSION,
        # the noise each setting shows instead of the image, and the seed a per-question one is drawn from
        noise={name: noise_kind(setting) for name, setting in HUMBLE["settings"].items()},
        seed=config["seed"],
    log:
        LOG("write_humble_records"),
    threads: get_threads("write_humble_records")
    resources:
        **get_resources("write_humble_records"),
    conda:
        get_env("write_humble_records")
    script:
        "../scripts/run_stage.py"


rule describe_humble_questions:
    input:
        questions=P("humble_questions"),
        question_counters=P("humble_question_counters"),
    output:
        figure2=humble_tables("figure2"),
        figure2_plot=report(P("figure2_plot"), caption="../report/humblebench.rst", category="HumbleBench"),
        # what the manual filtering did, known only for the questions written here
        table9=humble_tables("table9") if SCENE_GRAPHS else [],
    log:
        LOG("describe_humble_questions"),
    threads: get_threads("describe_humble_questions")
    resources:
        **get_resources("describe_humble_questions"),
    conda:
        get_env("describe_humble_questions")
    script:
        "../scripts/run_stage.py"
