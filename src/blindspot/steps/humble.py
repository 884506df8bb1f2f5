"""HumbleBench (`workflow/rules/humble.smk`): questions from the release, our benchmark's images and
scene graphs -> answers per VLM x shard (every setting in one job) -> Tables 4 to 7 and the NOTA plot."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import schemas
from blindspot.io import read_table, write_records, write_table
from blindspot.prompts import PromptTemplate
from blindspot.steps import log, require_planned_code, spec, write_counters


def write_scene_questions(
    scene_graphs: str,
    template: str,
    describer: dict[str, Any],
    writer: dict[str, Any],
    cue_instruction: str,
    cue_tokens: int,
    writer_max_tokens: int,
    batch_size: int,
    seed: int,
    cues_journal: str,
    out: str,
    verification_out: str,
    counters_out: str,
) -> None:
    """HumbleBench's own construction: attribute cues from a VLM on each cropped object, then an LLM
    writing questions from the scene graph; candidates, with a CSV for people to verify them. The cues
    are journaled as they come (`cues_journal`), so a killed job describes only what it had not."""
    from blindspot.humblebench import questions as humble_questions
    from blindspot.models.textgen import load_text_generator
    from blindspot.models.vlm_scoring import TransformersVLMScorer

    graphs = humble_questions.read_scene_graphs(scene_graphs)
    vlm = TransformersVLMScorer(spec(describer), batch_size)
    cues = humble_questions.attribute_cues(graphs, vlm, cue_instruction, cue_tokens, cues_journal)
    del vlm  # one model at a time in memory
    writer_spec = spec(writer)
    # Up to three questions of JSON: the writer's own token budget (for triplets) may be too short.
    writer_spec = dataclasses.replace(
        writer_spec, generation=writer_spec.generation | {"max_tokens": writer_max_tokens}
    )
    llm = load_text_generator(writer_spec, seed, batch_size)
    rows, counters = humble_questions.questions_from_scene_graphs(graphs, cues, llm, PromptTemplate.load(template))
    humble_questions.export_for_verification(rows, verification_out)
    write_counters(counters_out, counters, "scene-graph questions")
    write_table(out, pd.DataFrame(rows, columns=schemas.HUMBLE_QUESTIONS.names), schemas.HUMBLE_QUESTIONS)
    Path(cues_journal).unlink()


def make_humble_questions(
    benchmark: Sequence[str],
    taxonomies: Sequence[str],
    scene_candidates: Sequence[str],
    verification: Sequence[str],
    release_copy: Sequence[str],
    release: str | None,
    from_benchmark: dict[str, Any] | None,
    domains: Sequence[str],
    seed: int,
    out: str,
    images: str,
    counters_out: str,
    limit: int | None,
) -> None:
    """Every HumbleBench question the config asks for: the official release (its local copy, or its hub
    id), questions from our benchmark's images, and the scene-graph candidates (after people's
    decisions, when given: the verification sheet, or a `question_check` annotation project's labels,
    Label Studio's JSON export); given a `limit`, the sample of that many that everyone draws."""
    from blindspot.annotation.labels import read_labels
    from blindspot.humblebench.questions import decisions_from_labels, read_verification_sheet
    from blindspot.humblebench.sources import collect_questions
    from blindspot.protobias.taxonomy import load_taxonomy

    Path(images).mkdir(parents=True, exist_ok=True)
    decisions = None
    if scene_candidates and verification:  # the decisions are read only for candidates to apply them to
        sheet = verification[0]
        decisions = (
            decisions_from_labels(read_labels("question_check", sheet), sheet)
            if Path(sheet).suffix == ".json"
            else read_verification_sheet(sheet)
        )
    frame, counters = collect_questions(
        release_copy[0] if release_copy else release,
        images,
        read_table(benchmark[0], schemas.BENCHMARK_PAIRS) if benchmark else None,
        {domain: load_taxonomy(path, domain) for domain, path in zip(domains, taxonomies, strict=True)},
        from_benchmark,
        seed,
        read_table(scene_candidates[0], schemas.HUMBLE_QUESTIONS) if scene_candidates else None,
        decisions,
        limit,
    )
    write_counters(counters_out, counters, "HumbleBench questions")
    write_table(out, frame, schemas.HUMBLE_QUESTIONS)


def answer_humble(
    questions: str,
    templates: Sequence[str],
    prompt: str,
    model: dict[str, Any],
    protocol: dict[str, Any],
    settings: dict[str, dict[str, Any]],
    answer_shards: int,
    batch_size: int | None,
    seed: int,
    journal: str,
    vlm: str,
    shard: str,
    out: str,
    counters_out: str,
    cache: str = "",
    planned_requests: int | None = None,
    api_key_is_set: bool = True,
) -> None:
    """One VLM answers one shard of the questions as each setting it answers shows them (`settings`: name ->
    transforms, in the order of their `templates`), in one job and one engine, asked under
    its `protocol` (`humblebench.protocols`: the `prompt` file around the question, decoding, budget, where
    the answer is cut), its images read a batch at a time; the answers are journaled as they come
    (`journal`), so a killed job answers only what it had not. An API VLM's replies are cached in `cache`
    (`models.api.vlm`), and its client sends no more than its `planned_requests` (`blindspot.bill`) times
    `client.max_attempts`, a batch as many as the client may have in flight (`batch_size` None); without
    its key (`api_key_is_set`) it answers nothing, as an API metric is skipped, and the tables go on without it."""
    from blindspot.humblebench import answers as humble_answers
    from blindspot.models.api.client import with_planned_requests
    from blindspot.models.api.vlm import load_answerer
    from blindspot.registry import AnswerProtocol

    model = with_planned_requests(model, planned_requests)
    vlm_spec = spec(model)
    mine = humble_answers.shard_questions(read_table(questions, schemas.HUMBLE_QUESTIONS), int(shard), answer_shards)
    if vlm_spec.api_key_env and not api_key_is_set:
        log.warning(
            "%s: the API key variable %s is not set or empty; skipping its %d questions (setting the "
            "key runs this job again)",
            vlm,
            vlm_spec.api_key_env,
            len(mine),
        )
        mine = mine.iloc[:0]
    shown = {
        setting: (transforms, PromptTemplate.load(template))
        for (setting, transforms), template in zip(settings.items(), templates, strict=True)
    }
    frame, counters = humble_answers.answer_shard(
        mine,
        shown,
        vlm_spec,
        lambda: load_answerer(vlm_spec, batch_size, cache),
        dataclasses.replace(AnswerProtocol.from_params(protocol), prompt=prompt),
        seed,
        journal,
    )
    write_counters(counters_out, counters, f"{vlm}/{shard}")
    write_table(out, frame, schemas.HUMBLE_ANSWERS)
    Path(journal).unlink(missing_ok=True)  # an empty shard never made one


def sample_human_questions(
    questions: str,
    study: dict[str, Any],
    original: str,
    stress: str,
    settings: dict[str, dict[str, Any]],
    seed: int,
    out: str,
) -> None:
    """Table 7's human study: each annotator's question set (`human_study.sample_question_sets`), the
    questions as their setting shows them."""
    from blindspot.humblebench.human_study import sample_question_sets

    frame = sample_question_sets(
        read_table(questions, schemas.HUMBLE_QUESTIONS), study["annotators"], study, original, stress, settings, seed
    )
    write_table(out, frame, schemas.HUMAN_STUDY)
    for annotator, own in frame.groupby("annotator", sort=False):
        log.info("%s: %s", annotator, own["setting"].value_counts().to_dict())


def todays_answers(answers: Sequence[str], parser_version: int) -> pd.DataFrame:
    """Every answer shard's rows, their texts read again by today's parser (`metrics.with_todays_reading`),
    which must be the one the workflow planned with (`parser_version`)."""
    from blindspot.humblebench.humility import with_todays_reading
    from blindspot.humblebench.parsing import PARSER_VERSION

    require_planned_code(
        PARSER_VERSION, parser_version, f"the job's HumbleBench parser is version {PARSER_VERSION}", str(parser_version)
    )
    frame = pd.concat([read_table(path, schemas.HUMBLE_ANSWERS) for path in answers], ignore_index=True)
    frame, changed = with_todays_reading(frame)
    if changed:
        log.info(
            "%d of %d answers read otherwise by today's parser than when answered: read as today's", changed, len(frame)
        )
    return frame


def make_humble_tables(
    answers: Sequence[str],
    questions: str,
    human_answers: Sequence[str],
    human_study: Sequence[str],
    reading: str,
    settings: dict[str, dict[str, str]],
    original: str,
    stress: str,
    cautious: str | None,
    metrics: str,
    table4: Sequence[str],
    table5: Sequence[str],
    table6: Sequence[str],
    table7: Sequence[str],
    table_a1: Sequence[str],
    table_a2: Sequence[str],
    plot: str,
    parser_version: int,
    groups: dict[str, str | None] | None,
    sample: Sequence[str],
    bootstrap: dict[str, int],
    comparisons: Sequence[str],
) -> None:
    """Every metric per VLM x setting x reading, with intervals that resample the `questions`' images
    (`bootstrap`: samples and seed), every two VLMs compared per setting (`comparisons`: CSV, Markdown),
    Tables 4-6 (7, given human answers; the appendix's Original -> Cautious table, given a `cautious`
    setting), and the NOTA plot; Tables 4 and 6 list the VLMs
    in their `groups` (name -> the registry entry's `group`). The answers' texts are read again by today's
    parser, which must be the one the workflow planned with (`parser_version`). On a sample of the questions
    (`sample`: their counters) every table's CSV rows, caption and the plot's title say how many of how many."""
    from blindspot.annotation.labels import read_human_answers
    from blindspot.humblebench import tables as humble_tables
    from blindspot.humblebench.comparisons import vlm_comparisons, write_vlm_comparisons
    from blindspot.sampling import read_sample, sample_label

    frame = todays_answers(answers, parser_version)
    people = read_human_answers(human_answers[0], human_study[0] if human_study else None) if human_answers else None
    if people is not None:
        log.info("human answers: %d by %d annotators", len(people), people["annotator"].nunique())
    shown = read_table(questions, schemas.HUMBLE_QUESTIONS)
    images = dict(zip(shown["question_id"], shown["image_path"], strict=True))
    found, report = humble_tables.report_tables(
        frame, people, reading, settings, original, stress, cautious, groups=groups, images=images, **bootstrap
    )
    files = {"table4": table4, "table5": table5, "table6": table6, "table7": table7, "table_a1": table_a1}
    files["table_a2"] = table_a2
    drawn = sample_label(read_sample(sample), "questions")
    humble_tables.write_report(found, report, reading, settings, metrics, files, plot, drawn)
    compared = vlm_comparisons(frame, reading, images, bootstrap["n_boot"], bootstrap["seed"])
    write_vlm_comparisons(compared, comparisons, drawn)
    log.info("HumbleBench tables over %d answers", len(frame))


def write_humble_records(
    answers: Sequence[str],
    questions: str,
    reading: str,
    parser_version: int,
    noise: Mapping[str, str],
    seed: int,
    out: str,
) -> None:
    """Each answer of each VLM in each setting with its question, options as shown (and the noise shown instead
    of the image: `noise` per setting, drawn from `seed`), raw answer, how the metrics read it (`reading`) and
    whether that is right, as JSON lines (`humblebench.records`)."""
    from blindspot.humblebench.records import answer_records

    frame = todays_answers(answers, parser_version)
    records = answer_records(frame, read_table(questions, schemas.HUMBLE_QUESTIONS), reading, noise, seed)
    write_records(out, records, schemas.HUMBLE_RECORDS)
    log.info("%d HumbleBench records (%s reading)", len(records), reading)


def describe_humble_questions(
    questions: str, question_counters: str, figure2: Sequence[str], figure2_plot: str, table9: Sequence[str]
) -> None:
    """Figure 2 (the correct answers and the question types) as a table and a plot, and Table 9 (what the
    manual filtering did per type) when the questions include scene-graph candidates."""
    from blindspot.humblebench import distributions
    from blindspot.io import read_json
    from blindspot.reporting import write_report_table
    from blindspot.sampling import read_sample, sample_label

    frame = read_table(questions, schemas.HUMBLE_QUESTIONS)
    found = distributions.figure2_table(frame)
    drawn = sample_label(read_sample([question_counters]), "questions")
    write_report_table(found, *figure2, caption=distributions.figure2_caption(len(frame)), sample=drawn)
    distributions.plot_figure2(found, figure2_plot)
    if table9:
        filtering = read_json(question_counters).get("scene_graph_filtering", {})
        write_report_table(distributions.table9(filtering), *table9, caption=distributions.TABLE9_CAPTION)
    log.info("Figure 2 over %d questions%s", len(frame), "; Table 9" if table9 else "")
