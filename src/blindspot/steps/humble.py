"""HumbleBench (`workflow/rules/humble.smk`): questions from the release, our benchmark's images and
scene graphs -> answers per VLM x setting x shard -> Tables 4 to 7 and the NOTA plot."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import tables
from blindspot.io import read_table, write_table
from blindspot.prompts import PromptTemplate
from blindspot.steps import log, require_planned_code, spec, write_counters


def write_scene_questions(
    scene_graphs: str, template: str, describer: dict[str, Any], writer: dict[str, Any], cue_instruction: str,
    cue_tokens: int, writer_max_tokens: int, batch_size: int, seed: int, cues_journal: str, out: str,
    verification_out: str, counters_out: str,
) -> None:  # fmt: skip
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
    write_table(out, pd.DataFrame(rows, columns=tables.HUMBLE_QUESTIONS.names), tables.HUMBLE_QUESTIONS)
    Path(cues_journal).unlink()


def make_humble_questions(
    benchmark: Sequence[str], taxonomies: Sequence[str], scene_candidates: Sequence[str], verification: Sequence[str],
    release_copy: Sequence[str], release: str | None, from_benchmark: dict[str, Any] | None, domains: Sequence[str],
    seed: int, out: str, images: str, counters_out: str,
) -> None:  # fmt: skip
    """Every HumbleBench question the config asks for: the official release (its local copy, or its hub
    id), questions from our benchmark's images, and the scene-graph candidates (after people's
    decisions, when given: the verification sheet, or a `question_check` annotation project's labels,
    Label Studio's JSON export)."""
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
        read_table(benchmark[0], tables.BENCHMARK_PAIRS) if benchmark else None,
        {domain: load_taxonomy(path, domain) for domain, path in zip(domains, taxonomies, strict=True)},
        from_benchmark,
        seed,
        read_table(scene_candidates[0], tables.HUMBLE_QUESTIONS) if scene_candidates else None,
        decisions,
    )
    write_counters(counters_out, counters, "HumbleBench questions")
    write_table(out, frame, tables.HUMBLE_QUESTIONS)


def answer_humble(
    questions: str, template: str, model: dict[str, Any], transforms: dict[str, Any], answer_shards: int,
    batch_size: int | None, max_new_tokens: int, seed: int, journal: str, vlm: str, setting: str, shard: str,
    out: str, counters_out: str, cache: str = "", planned_requests: int | None = None,
) -> None:  # fmt: skip
    """One VLM answers one shard of the questions as one setting shows them, its images read a batch at a
    time; the answers are journaled as they come (`journal`), so a killed job answers only what it had not.
    An API VLM's replies are cached in `cache` (`models.api_vlm`), and its client sends no more than its
    `planned_requests` (`blindspot.bill`) times `client.max_attempts`, a batch as many as the client may
    have in flight (`batch_size` None)."""
    from blindspot.humblebench import answers as humble_answers
    from blindspot.models.api_vlm import load_answerer

    if planned_requests is not None:
        model = model | {"client": model["client"] | {"planned_requests": planned_requests}}
    vlm_spec = spec(model)
    mine = humble_answers.shard_questions(read_table(questions, tables.HUMBLE_QUESTIONS), int(shard), answer_shards)
    frame, counters = humble_answers.answer_shard(
        mine, setting, transforms, PromptTemplate.load(template), vlm_spec,
        lambda: load_answerer(vlm_spec, batch_size, cache), max_new_tokens, seed, journal,
    )  # fmt: skip
    write_counters(counters_out, counters, f"{vlm}/{setting}/{shard}")
    write_table(out, frame, tables.HUMBLE_ANSWERS)
    Path(journal).unlink(missing_ok=True)  # an empty shard never made one


def make_humble_tables(
    answers: Sequence[str], human_answers: Sequence[str], reading: str, settings: dict[str, dict[str, str]],
    original: str, stress: str, cautious: str | None, metrics: str, table4: Sequence[str], table5: Sequence[str],
    table6: Sequence[str], table7: Sequence[str], table_a1: Sequence[str], plot: str, parser_version: int,
) -> None:  # fmt: skip
    """Every metric per VLM x setting x reading, Tables 4-6 (7, given human answers; the appendix's
    Original -> Cautious table, given a `cautious` setting), and the NOTA plot. The answers' texts are
    read again by today's parser, which must be the one the workflow planned with (`parser_version`)."""
    from blindspot.humblebench import tables as humble_tables
    from blindspot.humblebench.metrics import parsed_texts
    from blindspot.humblebench.parsing import PARSER_VERSION

    require_planned_code(PARSER_VERSION, parser_version, f"the job's HumbleBench parser is version {PARSER_VERSION}",
                         str(parser_version))  # fmt: skip

    frame = pd.concat([read_table(path, tables.HUMBLE_ANSWERS) for path in answers], ignore_index=True)
    reread = parsed_texts(frame)
    changed = int((reread != frame["prediction_text"]).sum())
    if changed:
        log.info("%d of %d answers read otherwise by today's parser than when answered: the tables read today's",
                 changed, len(frame))  # fmt: skip
    frame["prediction_text"] = reread
    people = humble_tables.read_human_answers(human_answers[0]) if human_answers else None
    found, report = humble_tables.report_tables(frame, people, reading, settings, original, stress, cautious)
    files = {"table4": table4, "table5": table5, "table6": table6, "table7": table7, "table_a1": table_a1}
    humble_tables.write_report(found, report, reading, settings, metrics, files, plot)
    log.info("HumbleBench tables over %d answers", len(frame))
