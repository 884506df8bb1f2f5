"""Human annotation (`workflow/rules/annotation.smk`): projects for the annotation subsets, and, from
people's labels, the filter validation (Appendix D) and the pairwise preferences (Appendix E, Table 3's
human reference)."""

from __future__ import annotations

from collections.abc import Sequence

from blindspot import tables
from blindspot.io import read_table, write_json, write_text
from blindspot.steps import log


def make_annotation_projects(
    filter_validation: str, preference_pairs: str, scene_candidates: Sequence[str], annotators: Sequence[str],
    image_url_prefix: str, out: str,
) -> None:  # fmt: skip
    """Annotation projects for the papers' human studies: Label Studio tasks and config, and a link per
    annotator for the built-in page (`blindspot annotate serve`)."""
    from blindspot.annotation.projects import make_projects
    from blindspot.io import atomic_dir

    sources = {"image_score": read_table(filter_validation, tables.ANNOTATION_IMAGES),
               "pairwise": read_table(preference_pairs, tables.ANNOTATION_PAIRS)}  # fmt: skip
    if scene_candidates:
        sources["question_check"] = read_table(scene_candidates[0], tables.HUMBLE_QUESTIONS)
    with atomic_dir(out) as tmp:
        projects = make_projects(sources, annotators, tmp, image_url_prefix)
    for task, project in projects.items():
        log.info("%s: %d items for %d annotators", task, len(project["items"]), len(project["annotators"]))


def validate_filter(filter_validation: str, labels: str, threshold: float, csv: str, markdown: str, latex: str) -> None:
    """Appendix D: the people's 1-10 scores against the VLM filter on the filter validation images."""
    from blindspot.annotation.agreement import filter_validation as validation
    from blindspot.annotation.projects import read_labels, scored_images
    from blindspot.reporting import write_report_table

    images = read_table(filter_validation, tables.ANNOTATION_IMAGES)
    scored = scored_images(read_labels("image_score", labels), images, labels)
    log.info("filter validation: %d of %d images scored by people", len(scored), len(images))
    write_report_table(
        validation(scored, threshold), csv, markdown, latex, caption="Filter validation: people against the VLM filter"
    )


def human_preferences(
    preference_pairs: str, labels: str, majority: str, human_row: str, csv: str, markdown: str, latex: str
) -> None:
    """Appendix E: the annotators' pairwise kappa matrix, the majority per pair (Table 3's human
    reference) and Table 3's Human row."""
    from blindspot.annotation import agreement
    from blindspot.annotation.projects import pairwise_choices, read_labels
    from blindspot.reporting import write_report_table

    pairs = read_table(preference_pairs, tables.ANNOTATION_PAIRS)
    choices = pairwise_choices(read_labels("pairwise", labels), pairs)
    write_report_table(
        agreement.annotator_table(choices), csv, markdown, latex,
        caption="Pairwise quadratic weighted kappa between annotators",
    )  # fmt: skip
    votes = agreement.majority_choices(choices)
    write_text(majority, votes[["pair_id", "choice"]].to_csv(index=False))
    write_json(human_row, agreement.human_row(choices, pairs.set_index("pair_id")["domain"]))
    log.info("human preferences: %d labels on %d pairs; %d ties", len(choices), len(votes), int(votes["tied"].sum()))
