"""Human annotation (`workflow/rules/annotation.smk`): projects for the annotation subsets, and, from
people's labels, the filter validation (Appendix D) and the pairwise preferences (Appendix E, Table 3's
human reference)."""

from __future__ import annotations

from collections.abc import Sequence

from blindspot import schemas
from blindspot.io import read_table, write_json, write_text
from blindspot.steps import log


def make_annotation_projects(
    filter_validation: str,
    preference_pairs: str,
    scene_candidates: Sequence[str],
    human_study: Sequence[str],
    judge_template: str,
    annotators: Sequence[str],
    filter_evaluators: Sequence[str],
    study_annotators: Sequence[str],
    image_url_prefix: str,
    out: str,
) -> None:
    """Annotation projects for the papers' human studies: Label Studio tasks and config, and a link per
    annotator for the built-in page (`blindspot annotate serve`). The filter validation images go to the
    designated evaluators only (the paper: "a trained human evaluator"), who are shown the VLM filter's
    rubric (the `rubric` of its `judge_template`) so that both score on one scale; HumbleBench's human
    study (`humble_answer`, from its `human_study` sets) to its `study_annotators`, each item to the one
    whose set holds it; the other tasks go to every annotator."""
    from blindspot.annotation.projects import make_projects
    from blindspot.io import atomic_dir
    from blindspot.prompts import PromptTemplate

    strangers = [name for name in filter_evaluators if name not in annotators]
    if strangers:
        raise ValueError(
            f"annotation.filter_evaluators {strangers} are not in annotation.annotators {list(annotators)}"
        )
    rubric = PromptTemplate.load(judge_template).rubric
    if not rubric.strip():
        raise ValueError(f"{judge_template} has no rubric to show the filter evaluators")
    shared = {"pairwise": read_table(preference_pairs, schemas.ANNOTATION_PAIRS)}
    if scene_candidates:
        shared["question_check"] = read_table(scene_candidates[0], schemas.HUMBLE_QUESTIONS)
    with atomic_dir(out) as tmp:
        projects = make_projects(
            {"image_score": read_table(filter_validation, schemas.ANNOTATION_IMAGES)},
            filter_evaluators,
            tmp,
            image_url_prefix,
            {"image_score": rubric},
        ) | make_projects(shared, annotators, tmp, image_url_prefix)
        if human_study:
            study = read_table(human_study[0], schemas.HUMAN_STUDY)
            projects |= make_projects({"humble_answer": study}, study_annotators, tmp, image_url_prefix)
    for task, project in projects.items():
        log.info("%s: %d items for %d annotators", task, len(project["items"]), len(project["annotators"]))


def validate_filter(
    filter_validation: str,
    labels: str,
    evaluators: Sequence[str],
    threshold: float,
    csv: str,
    markdown: str,
    latex: str,
) -> None:
    """Appendix D: the designated evaluators' 1-10 scores against the VLM filter on the filter validation
    images (several evaluators' scores are averaged per image)."""
    from blindspot.annotation import agreement
    from blindspot.annotation.labels import read_labels, scored_images
    from blindspot.reporting import write_report_table

    images = read_table(filter_validation, schemas.ANNOTATION_IMAGES)
    scores = agreement.evaluator_scores(read_labels("image_score", labels), evaluators, labels)
    scored = scored_images(scores, images, labels)
    log.info("filter validation: %d of %d images scored by %s", len(scored), len(images), ", ".join(evaluators))
    caption = agreement.FILTER_VALIDATION_CAPTION.format(
        evaluators=", ".join(evaluators), images=len(scored), threshold=threshold
    )
    write_report_table(agreement.filter_validation(scored, threshold), csv, markdown, latex, caption=caption)


def human_preferences(
    preference_pairs: str, labels: str, majority: str, human_row: str, csv: str, markdown: str, latex: str
) -> None:
    """Appendix E: the annotators' pairwise kappa matrix, the majority per pair (Table 3's human
    reference) and Table 3's Human row."""
    from blindspot.annotation import agreement
    from blindspot.annotation.labels import pairwise_choices, read_labels
    from blindspot.reporting import write_report_table

    pairs = read_table(preference_pairs, schemas.ANNOTATION_PAIRS)
    choices = pairwise_choices(read_labels("pairwise", labels), pairs)
    write_report_table(
        agreement.annotator_table(choices),
        csv,
        markdown,
        latex,
        caption=agreement.ANNOTATOR_KAPPA_CAPTION,
    )
    votes = agreement.majority_choices(choices)
    write_text(majority, votes[["pair_id", "choice"]].to_csv(index=False))
    write_json(human_row, agreement.human_row(choices, pairs.set_index("pair_id")["domain"]))
    log.info("human preferences: %d labels on %d pairs; %d ties", len(choices), len(votes), int(votes["tied"].sum()))
