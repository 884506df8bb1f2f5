"""One function per workflow step: read inputs, call the logic, write outputs atomically.

Every rule runs `workflow/scripts/run_stage.py`, which calls the step named like the rule with the
rule's named inputs, outputs, params and wildcards as arguments. `python -m blindspot.stages STEP
--help` runs one step outside Snakemake for debugging, and every job leaves the arguments it ran with
beside its log (`.job.json`), so `python -m blindspot.stages replay FILE` runs that job again.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from blindspot import tables
from blindspot.config import GPUUnavailable, load_config, model_spec, running_step, shard_slice
from blindspot.io import provenance, read_table, write_json, write_table, write_text
from blindspot.prompts import PromptTemplate

log = logging.getLogger("blindspot")


def setup_logging(log_path: str | None = None) -> None:
    """Send everything (stderr, warnings, progress bars) to the job's log file."""
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        sys.stderr = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the job
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    logging.captureWarnings(True)


def shard_seed_rows(config: dict[str, Any], seeds: str, shard: str) -> pd.DataFrame:
    """The seeds of one shard: a slice of the domain's sorted seeds, as every sharded rule takes it."""
    return read_table(seeds, tables.SEEDS).iloc[shard_slice(shard, config["shard_size"])]


def shard_seed_ids(config: dict[str, Any], seeds: str, shard: str) -> pd.Series:
    return shard_seed_rows(config, seeds, shard)["seed_id"]


def make_seeds(taxonomy: str, domain: str, n_seeds: int, seed: int, out: str) -> None:
    from blindspot.taxonomy import sample_seeds

    seeds = sample_seeds(taxonomy, domain, n_seeds, seed)
    write_table(out, seeds, tables.SEEDS)
    log.info("%s: %d seeds from %s", domain, len(seeds), taxonomy)


def _write_shard(
    frame: pd.DataFrame, counters: dict[str, Any], schema: Any, out: str, counters_out: str, what: str
) -> None:
    from blindspot.triplets import raise_if_all_failed

    log.info("%s: %s", what, json.dumps(counters))
    raise_if_all_failed(frame, counters, what)
    write_json(counters_out, counters | {"provenance": provenance()})
    write_table(out, frame, schema)


def generate_triplets(
    config: dict[str, Any], domain: str, generator: str, shard: str, seeds: str, out: str, counters_out: str
) -> None:
    from blindspot.textgen import load_text_generator
    from blindspot.triplets import generate_triplets as generate

    stage = config["prompt_stage"]
    rows = shard_seed_rows(config, seeds, shard)
    engine = load_text_generator(
        model_spec(config, generator), seed=config["seed"] + int(shard), batch_size=stage["batch_size"]
    )
    frame, counters = generate(rows, engine, PromptTemplate.load(stage["generate_template"]))
    _write_shard(frame, counters, tables.RAW_TRIPLETS, out, counters_out, f"{domain}/{generator}/{shard}")


def judge_triplets(
    config: dict[str, Any], domain: str, judge: str, generator: str, shard: str, triplets: str, seeds: str, out: str,
    counters_out: str,
) -> None:  # fmt: skip
    from blindspot.judging import judge_triplets as judge_all
    from blindspot.textgen import load_text_generator

    stage = config["prompt_stage"]
    engine = load_text_generator(
        model_spec(config, judge), seed=config["seed"] + int(shard), batch_size=stage["batch_size"]
    )
    frame, counters = judge_all(
        read_table(triplets, tables.RAW_TRIPLETS),
        read_table(seeds, tables.SEEDS),
        engine,
        PromptTemplate.load(stage["judge_template"]),
    )
    _write_shard(frame, counters, tables.JUDGMENTS, out, counters_out, f"{domain}/{judge}/{generator}/{shard}")


def accept_triplets(
    seeds: str, raw: Sequence[str], judgments: Sequence[str], judges: Sequence[str], out: str, counters_out: str
) -> None:
    from blindspot.judging import accept_unanimous

    kept, counters = accept_unanimous(
        pd.concat([read_table(p, tables.RAW_TRIPLETS) for p in raw], ignore_index=True),
        pd.concat([read_table(p, tables.JUDGMENTS) for p in judgments], ignore_index=True),
        read_table(seeds, tables.SEEDS),
        list(judges),
    )
    log.info("accepted %d of %d generated triplets: %s", len(kept), counters["generated"], json.dumps(counters))
    write_json(counters_out, counters | {"provenance": provenance(judges=list(judges))})
    write_table(out, kept, tables.TRIPLETS)


def check_prompt_quality(config: dict[str, Any], triplets: str, out: str) -> None:
    from blindspot.quality import score_prompt_quality

    stage = config["prompt_stage"]
    frame = score_prompt_quality(
        read_table(triplets, tables.TRIPLETS),
        model_spec(config, stage["embedding_model"]),
        model_spec(config, stage["nli_model"]),
        stage["batch_size"],
    )
    write_table(out, frame, tables.PROMPT_QUALITY)


def make_table1(quality: Sequence[str], csv: str, markdown: str, latex: str) -> None:
    """Table 1 from every domain's prompt-quality table."""
    from blindspot.quality import table1
    from blindspot.reporting import write_report_table

    frames = {}
    for path in quality:
        frame = read_table(path, tables.PROMPT_QUALITY)
        domain = Path(path).parent.name
        frames[domain] = frame
    write_report_table(
        table1(frames),
        csv,
        markdown,
        latex,
        caption="Table 1: automatic prompt-quality validation of the accepted ProtoBias triplets.",
    )


def render_images(
    config: dict[str, Any], domain: str, t2i: str, shard: str, triplets: str, seeds: str, images_dir: str, out: str,
    counters_out: str,
) -> None:  # fmt: skip
    """Render the accepted triplets of one seed shard with one text-to-image model."""
    from blindspot.render import render_triplets

    stage = config["image_stage"]
    shard_seeds = shard_seed_ids(config, seeds, shard)
    accepted = read_table(triplets, tables.TRIPLETS)
    rows = accepted[accepted["seed_id"].isin(shard_seeds)]
    frame, counters = render_triplets(
        rows, model_spec(config, t2i), images_dir, stage["images_per_description"], config["seed"],
        stage["render_batch_size"],
    )  # fmt: skip
    log.info("%s/%s/%s: %s", domain, t2i, shard, json.dumps(counters))
    write_json(counters_out, counters | {"provenance": provenance()})
    write_table(out, frame, tables.RENDERS)


def judge_images(
    config: dict[str, Any], domain: str, t2i: str, vlm: str, shard: str, renders: str, out: str, counters_out: str
) -> None:
    """Score every image of one render shard against its own description with one VLM."""
    from blindspot.vlm_scoring import judge_images as judge
    from blindspot.vlm_scoring import load_vlm_scorer

    stage = config["image_stage"]
    scorer = load_vlm_scorer(model_spec(config, vlm), stage["judge_batch_size"])
    frame, counters = judge(read_table(renders, tables.RENDERS), scorer, PromptTemplate.load(stage["judge_template"]))
    log.info("%s/%s/%s/%s: %s", domain, t2i, vlm, shard, json.dumps(counters))
    write_json(counters_out, counters | {"provenance": provenance()})
    write_table(out, frame, tables.VLM_SCORES)


def keep_consensus_pairs(
    config: dict[str, Any], domain: str, renders: Sequence[str], scores: Sequence[str], out: str, counters_out: str
) -> None:
    """Pair each I_corr with its I_adv and keep the pairs that pass every VLM."""
    from blindspot.consensus import keep_consensus_pairs as keep
    from blindspot.consensus import pair_images

    stage = config["image_stage"]
    pairs, counters = keep(
        pair_images(pd.concat([read_table(p, tables.RENDERS) for p in renders], ignore_index=True)),
        pd.concat([read_table(p, tables.VLM_SCORES) for p in scores], ignore_index=True),
        stage["vlms"],
        stage["consensus_threshold"],
        stage["consensus_score"],
    )
    log.info("%s: kept %d of %d pairs", domain, counters["pairs_kept"], counters["pairs_in"])
    write_json(counters_out, counters | {"provenance": provenance()})
    write_table(out, pairs, tables.PAIRS)


def measure_image_quality(config: dict[str, Any], shard: str, pairs: str, triplets: str, seeds: str, out: str) -> None:
    """MUSIQ, NIQE (or whatever `iqa_metrics` names) on both images of each kept pair of one shard."""
    from blindspot.iqa import PyiqaMetric, measure_pairs

    stage = config["image_stage"]
    shard_seeds = shard_seed_ids(config, seeds, shard)
    accepted = read_table(triplets, tables.TRIPLETS)
    in_shard = accepted.loc[accepted["seed_id"].isin(shard_seeds), "triplet_id"]
    kept = read_table(pairs, tables.PAIRS)
    kept = kept[kept["kept"] & kept["triplet_id"].isin(in_shard)]
    frames = [
        measure_pairs(kept, PyiqaMetric(model_spec(config, name), stage["iqa_batch_size"]))
        for name in stage["iqa_metrics"]
    ]
    write_table(out, pd.concat(frames, ignore_index=True), tables.IMAGE_QUALITY)


def make_table2(quality: Sequence[str], csv: str, markdown: str, latex: str) -> None:
    from blindspot.iqa import table2
    from blindspot.reporting import write_report_table

    frame = pd.concat([read_table(p, tables.IMAGE_QUALITY) for p in quality], ignore_index=True)
    caption = "Table 2: no-reference image quality of I_corr and I_adv over all kept pairs."
    write_report_table(table2(frame), csv, markdown, latex, caption=caption)


def split_benchmark(
    config: dict[str, Any], pairs: Sequence[str], triplets: Sequence[str], out: str, filter_validation: str,
    preference_pairs: str, counters_out: str,
) -> None:  # fmt: skip
    """Split the kept pairs by triplet; draw the two disjoint annotation subsets."""
    from blindspot import split

    bench = config["benchmark"]
    accepted = pd.concat([read_table(p, tables.TRIPLETS) for p in triplets], ignore_index=True)
    all_pairs = pd.concat([read_table(p, tables.PAIRS) for p in pairs], ignore_index=True)
    all_pairs, kept = split.kept_with_splits(all_pairs, accepted, config["seed"], bench["test_fraction"])
    images = split.image_decisions(all_pairs, config["image_stage"]["consensus_threshold"])
    descriptions = pd.concat(
        [all_pairs[["corr_image_id", "correct_description"]].set_axis(["image_id", "description"], axis=1),
         all_pairs[["adv_image_id", "adversarial_description"]].set_axis(["image_id", "description"], axis=1)]
    ).drop_duplicates("image_id")  # fmt: skip
    images = images.merge(descriptions, on="image_id", how="left", validate="many_to_one")
    validation, validation_counts = split.filter_validation_subset(
        images, bench["filter_validation_images"], config["seed"]
    )
    preference, preference_counts = split.preference_subset(
        kept[kept["split"] == "test"], list(config["domains"]), bench["preference_pairs_per_domain"],
        set(validation["image_id"]), config["seed"],
    )  # fmt: skip
    counters = {
        "pairs_kept": len(kept),
        "per_domain_and_split": {f"{d}/{s}": int(n) for (d, s), n in kept.groupby(["domain", "split"]).size().items()},
        "filter_validation": validation_counts,
        "preference": preference_counts,
    }
    log.info("benchmark: %s", json.dumps(counters))
    write_table(out, kept[tables.BENCHMARK_PAIRS.names], tables.BENCHMARK_PAIRS)
    write_table(filter_validation, validation, tables.ANNOTATION_IMAGES)
    write_table(preference_pairs, preference[tables.ANNOTATION_PAIRS.names], tables.ANNOTATION_PAIRS)
    write_json(counters_out, counters | {"provenance": provenance()})


def export_dataset(config: dict[str, Any], benchmark: str, out: str, card: str) -> None:
    """The benchmark as a `datasets`-loadable folder with a dataset card (also beside it, for the report)."""
    from blindspot.export import export_dataset as export

    roles = [("generator", name) for name in config["prompt_stage"]["generators"]]
    roles += [("judge", name) for name in config["prompt_stage"]["judges"]]
    roles += [("text-to-image", name) for name in config["image_stage"]["t2i_models"]]
    roles += [("image filter", name) for name in config["image_stage"]["vlms"]]
    models = [(role, model_spec(config, name).model_id, model_spec(config, name).licence or "see model card")
              for role, name in roles]  # fmt: skip
    about = {
        "name": config["benchmark"]["name"],
        "run_name": config["run_name"],
        "threshold": config["image_stage"]["consensus_threshold"],
        "models": models,
    }
    export(read_table(benchmark, tables.BENCHMARK_PAIRS), out, about)
    write_text(card, (Path(out) / "README.md").read_text())


def counter_stage(path: str) -> str:
    """The stage a counters file belongs to, from where it lies: raw, judged, renders, vlm_scores, ..."""
    parts = Path(path).parts
    for stage in ("raw", "judged", "renders", "vlm_scores", "metric_scores", "answers"):
        if stage in parts:
            return stage
    return Path(path).name.removesuffix(".counters.json")


def make_report_items(
    config: dict[str, Any], benchmark: str, scores: Sequence[str], counters: Sequence[str], grid: str, csv: str
) -> None:  # fmt: skip
    """The report's example grid (Figure 3) and the table of every stage's counters."""
    from blindspot.figures import example_grid, example_pairs, stage_counters

    metrics = {name: entry["label"] for name, entry in config["evaluation"]["metrics"].items()}
    frames = [read_table(path, tables.METRIC_SCORES) for path in scores]
    all_scores = pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True)
    scored = {name: label for name, label in metrics.items() if name in set(all_scores["metric"])}
    examples = example_pairs(read_table(benchmark, tables.BENCHMARK_PAIRS), config["report"]["examples_per_domain"])
    example_grid(examples, all_scores, scored, grid)
    stages = [(counter_stage(path), path) for path in counters]
    write_text(csv, stage_counters(stages).to_csv(index=False))


def score_metric(
    config: dict[str, Any], domain: str, metric: str, shard: str, pairs: str, triplets: str, seeds: str, cache: str,
    trained: Sequence[str], out: str, counters_out: str,
) -> None:  # fmt: skip
    """Score the kept test pairs of one seed shard with one T2I metric, M(T, I_corr) and M(T, I_adv).
    The split is a function of the triplet id, so a job reads only its own domain's tables."""
    from blindspot import split
    from blindspot.metrics import MetricSkipped, load_metric
    from blindspot.metrics.scoring import ScoreCache, metric_identity, score_pairs
    from blindspot.protoscore import trained_sha256

    evaluation = config["evaluation"]
    entry = evaluation["metrics"][metric]
    shard_seeds = shard_seed_ids(config, seeds, shard)
    _, kept = split.kept_with_splits(
        read_table(pairs, tables.PAIRS), read_table(triplets, tables.TRIPLETS), config["seed"],
        config["benchmark"]["test_fraction"],
    )  # fmt: skip
    test = kept[(kept["split"] == "test") & kept["seed_id"].isin(shard_seeds)]

    def load() -> Any:
        spec = model_spec(config, entry["model"])
        models = {arg: model_spec(config, name) for arg, name in entry.get("models", {}).items()}
        learned = {"trained": trained[0]} if trained else {}
        return load_metric(
            entry["plugin"], spec, evaluation["batch_size"], cache, **entry.get("args", {}), **models, **learned
        )

    identity = metric_identity(config, metric)
    if trained:  # a retrained scorer is another metric: its weights are part of the cache key
        identity["version"] += " trained:" + trained_sha256(trained[0])
    try:
        frame, counters = score_pairs(test, metric, identity, load, ScoreCache(cache), evaluation["batch_size"])
    except MetricSkipped as skipped:
        # A metric that cannot run here (an API judge without its key) leaves its rows out, not the run.
        log.warning("%s", skipped)
        frame, counters = pd.DataFrame(columns=[f.name for f in tables.METRIC_SCORES]), {"skipped": str(skipped)}
    log.info("%s/%s/%s: %s", domain, metric, shard, json.dumps(counters))
    write_json(counters_out, counters | {"provenance": provenance()})
    write_table(out, frame, tables.METRIC_SCORES)


def make_table3(
    config: dict[str, Any], scores: Sequence[str], benchmark: str, human_choices: Sequence[str],
    human_row: Sequence[str], csv: str, markdown: str, latex: str, breakdown: str, plot: str,
) -> None:  # fmt: skip
    """Pairwise accuracy with CIs per metric, domain, knob, T2I model and subcategory; Table 3 and its plot.
    With human choices, Table 3 is computed on the annotated pairs, as in the paper."""
    from blindspot import evaluation

    settings = config["evaluation"]
    families = settings["families"]
    metrics = {name: {"label": entry["label"], "family": families[entry["family"]]}
               for name, entry in settings["metrics"].items()}  # fmt: skip
    frames = [read_table(path, tables.METRIC_SCORES) for path in scores]
    all_scores = pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True)  # a skipped metric is empty
    pairs = read_table(benchmark, tables.BENCHMARK_PAIRS)
    humans = evaluation.read_human_choices(human_choices[0]) if human_choices else None
    long = evaluation.accuracy_breakdown(
        all_scores, pairs, metrics, humans, annotated_only=humans is not None,
        n_boot=settings["bootstrap_samples"], seed=config["seed"],
    )  # fmt: skip
    evaluation.write_breakdown(long, breakdown)
    domains = list(config["domains"])
    table = evaluation.table3(long, metrics, domains)
    if human_row:
        table = evaluation.with_human_kappa(table, json.loads(Path(human_row[0]).read_text()), domains)
    evaluation.write_table3(table, csv, markdown, latex)
    evaluation.plot_accuracy(long, metrics, plot, domains)
    log.info("Table 3 over %d scored rows of %d metrics", len(all_scores), len(metrics))


def write_scene_questions(config: dict[str, Any], scene_graphs: str, out: str, verification_out: str,
                          counters_out: str) -> None:  # fmt: skip
    """HumbleBench's own construction: attribute cues from a VLM on each cropped object, then an LLM
    writing questions from the scene graph; candidates, with a CSV for people to verify them."""
    from blindspot import humble_questions
    from blindspot.textgen import load_text_generator
    from blindspot.vlm_scoring import TransformersVLMScorer

    stage = config["humblebench"]["scene_graphs"]
    graphs = humble_questions.read_scene_graphs(scene_graphs)
    describer = TransformersVLMScorer(model_spec(config, stage["describer"]), config["humblebench"]["batch_size"])
    cues = humble_questions.attribute_cues(graphs, describer, stage["cue_instruction"], stage["cue_tokens"])
    del describer  # one model at a time in memory
    writer_spec = model_spec(config, stage["writer"])
    # Up to three questions of JSON: the writer's own token budget (for triplets) may be too short.
    writer_spec = dataclasses.replace(
        writer_spec, generation=writer_spec.generation | {"max_tokens": stage["writer_max_tokens"]}
    )
    writer = load_text_generator(writer_spec, config["seed"], config["humblebench"]["batch_size"])
    rows, counters = humble_questions.questions_from_scene_graphs(
        graphs, cues, writer, PromptTemplate.load(stage["template"])
    )
    log.info("scene-graph questions: %s", json.dumps(counters))
    humble_questions.export_for_verification(rows, verification_out)
    write_json(counters_out, counters | {"provenance": provenance()})
    write_table(out, pd.DataFrame(rows, columns=tables.HUMBLE_QUESTIONS.names), tables.HUMBLE_QUESTIONS)


def make_humble_questions(
    config: dict[str, Any], benchmark: Sequence[str], scene_candidates: Sequence[str], verification: Sequence[str],
    out: str, images: str, counters_out: str,
) -> None:  # fmt: skip
    """Every HumbleBench question the config asks for: the official release, questions from our
    benchmark's images, and the scene-graph candidates (after people's decisions, when given)."""
    from blindspot import humble_questions
    from blindspot.taxonomy import load_taxonomy

    settings = config["humblebench"]
    rows, counters = [], {}
    Path(images).mkdir(parents=True, exist_ok=True)
    if settings.get("release"):
        rows += humble_questions.load_release(settings["release"], images)
        counters["release"] = len(rows)
    if benchmark:
        source = settings["from_benchmark"]
        taxonomies = {d: load_taxonomy(entry["taxonomy"], d) for d, entry in config["domains"].items()}
        built, skipped = humble_questions.questions_from_benchmark(
            read_table(benchmark[0], tables.BENCHMARK_PAIRS), taxonomies, source["kinds"], source["nota_share"],
            config["seed"],
        )  # fmt: skip
        rows += built
        counters |= {"benchmark": len(built), "benchmark_kinds_without_a_question": skipped}
    if scene_candidates:
        candidates = read_table(scene_candidates[0], tables.HUMBLE_QUESTIONS).to_dict("records")
        if verification:
            candidates, decisions = humble_questions.apply_verification(candidates, verification[0])
            counters["scene_graph_decisions"] = decisions
        else:
            flawed = [row for row in candidates if humble_questions.problem(row)]
            candidates = [row for row in candidates if not humble_questions.problem(row)]
            counters["scene_graph_left_out_with_problems"] = len(flawed)
            log.warning("%d scene-graph questions are used unverified (no verification file); %d with problems are "
                        "left out", len(candidates), len(flawed))  # fmt: skip
        rows += candidates
        counters["scene_graph"] = len(candidates)
    frame = pd.DataFrame(rows, columns=tables.HUMBLE_QUESTIONS.names)
    duplicated = frame["question_id"][frame["question_id"].duplicated()]
    if len(duplicated):
        raise ValueError(f"question id {duplicated.iloc[0]} comes twice; question ids must be unique across sources")
    counters["questions"] = len(frame)
    counters["per_type"] = {t: int(n) for t, n in frame["type"].value_counts().items()}
    log.info("HumbleBench questions: %s", json.dumps(counters))
    write_json(counters_out, counters | {"provenance": provenance()})
    write_table(out, frame, tables.HUMBLE_QUESTIONS)


def answer_humble(
    config: dict[str, Any], vlm: str, setting: str, shard: str, questions: str, templates: Sequence[str], out: str,
    counters_out: str,
) -> None:  # fmt: skip
    """One VLM answers one shard of the questions as one setting shows them, its images read a batch at a time."""
    from blindspot import humble
    from blindspot.humble_questions import row_question
    from blindspot.vlm_scoring import load_vlm_scorer

    settings = config["humblebench"]
    transforms = settings["settings"][setting]
    rows = read_table(questions, tables.HUMBLE_QUESTIONS)
    mine = rows[rows["question_id"].map(lambda q: humble.shard_of(q, settings["answer_shards"])) == int(shard)]
    shown = [(humble.present(row_question(row), setting, transforms, config["seed"]), row["image_path"])
             for row in mine.to_dict("records")]  # fmt: skip
    spec = model_spec(config, vlm)
    template = {setting: PromptTemplate.load(templates[0])}
    answered = []
    if shown:
        scorer = load_vlm_scorer(spec, settings["batch_size"])
        answered = humble.answer_in_batches(shown, scorer, template, settings["max_new_tokens"], config["seed"])
    frame = pd.DataFrame(
        [row | {"vlm": vlm, "model_id": spec.model_id, "model_revision": spec.revision or ""} for row in answered],
        columns=tables.HUMBLE_ANSWERS.names,
    )
    counters = {
        "questions": len(frame),
        "unparseable_text": int((frame["prediction_text"] == "").sum()),
        "text_and_logits_agree": int((frame["prediction_text"] == frame["prediction_logits"]).sum()),
    }
    log.info("%s/%s/%s: %s", vlm, setting, shard, json.dumps(counters))
    write_json(counters_out, counters | {"provenance": provenance()})
    write_table(out, frame, tables.HUMBLE_ANSWERS)


def make_humble_tables(
    config: dict[str, Any], answers: Sequence[str], human_answers: Sequence[str], metrics: str, table4: Sequence[str],
    table5: Sequence[str], table6: Sequence[str], table7: Sequence[str], plot: str,
) -> None:  # fmt: skip
    """Every metric per VLM x setting x reading, Tables 4-6 (and 7, given human answers), and the NOTA plot."""
    from blindspot import humble_tables
    from blindspot.reporting import write_report_table

    settings = config["humblebench"]
    reading = settings["reading"]
    frame = pd.concat([read_table(path, tables.HUMBLE_ANSWERS) for path in answers], ignore_index=True)
    found = humble_tables.metrics_table(frame)
    write_text(metrics, found.to_csv(index=False))
    named = settings["settings"]
    original = settings["tables"]["original"]
    write_report_table(
        humble_tables.table4(found, reading, original),
        *table4,
        caption=f"Table 4: the {named[original]['label']} setting ({reading} reading), %",
    )
    write_report_table(
        humble_tables.table5(found, reading, named), *table5, caption=f"Table 5: the settings ({reading} reading), %"
    )
    write_report_table(
        humble_tables.table6(found, reading, named),
        *table6,
        caption=f"Table 6: models across settings ({reading} reading), %",
    )
    if human_answers:
        people = humble_tables.read_human_answers(human_answers[0])
        write_report_table(
            humble_tables.table7(frame, people, reading, **settings["tables"]),
            *table7,
            caption="Table 7: humans and models on the same questions, %",
        )
    humble_tables.plot_nota_tradeoff(found, reading, named, plot)
    log.info("HumbleBench tables over %d answers", len(frame))


def train_protoscore(config: dict[str, Any], benchmark: str, checkpoint: str, out: str) -> None:
    """Train ProtoScore on the benchmark's train split; resumes from `checkpoint` after a kill."""
    from blindspot import protoscore

    settings = config["protoscore"]
    pairs = read_table(benchmark, tables.BENCHMARK_PAIRS)
    train_pairs = pairs[pairs["split"] == "train"]
    log.info("ProtoScore: %d train pairs of %d", len(train_pairs), len(pairs))
    scorer = protoscore.load_scorer(
        model_spec(config, settings["model"]), protoscore.TrainSettings.from_config(settings, config["seed"])
    )
    history = protoscore.train(scorer, train_pairs, out, checkpoint)
    log.info("ProtoScore trained: %d steps, last loss %.4f", len(history), history["loss"].iloc[-1])


def score_transfer(config: dict[str, Any], transfer: str, trained: str, out: str) -> None:
    """ProtoScore on an external pairwise set: pairwise accuracy (ties fail) with a bootstrap interval."""
    from blindspot.metrics.protoscore import ProtoScore
    from blindspot.protoscore import read_transfer_pairs, transfer_accuracy

    pairs = read_transfer_pairs(transfer)
    metric = ProtoScore(model_spec(config, config["protoscore"]["model"]), config["evaluation"]["batch_size"], trained)
    table = transfer_accuracy(metric, pairs, config["evaluation"]["bootstrap_samples"], config["seed"])
    write_text(out, table.to_csv(index=False))
    log.info("transfer: %s", table.to_dict("records"))


def make_annotation_projects(
    config: dict[str, Any], filter_validation: str, preference_pairs: str, scene_candidates: Sequence[str], out: str
) -> None:  # fmt: skip
    """Annotation projects for the papers' human studies: Label Studio tasks and config, and a link per
    annotator for the built-in page (`blindspot annotate serve`)."""
    from blindspot.annotation import make_project
    from blindspot.io import atomic_dir

    settings = config["annotation"]
    sources = {"image_score": read_table(filter_validation, tables.ANNOTATION_IMAGES),
               "pairwise": read_table(preference_pairs, tables.ANNOTATION_PAIRS)}  # fmt: skip
    if scene_candidates:
        sources["question_check"] = read_table(scene_candidates[0], tables.HUMBLE_QUESTIONS)
    with atomic_dir(out) as tmp:
        for task, table in sources.items():
            project = make_project(task, table, settings["annotators"], tmp / task, settings["image_url_prefix"])
            log.info("%s: %d items for %d annotators", task, len(project["items"]), len(project["annotators"]))


def validate_filter(config: dict[str, Any], filter_validation: str, labels: str, csv: str, markdown: str,
                    latex: str) -> None:  # fmt: skip
    """Appendix D: the people's 1-10 scores against the VLM filter on the filter validation images."""
    from blindspot.agreement import filter_validation as validation
    from blindspot.annotation import read_labels
    from blindspot.reporting import write_report_table

    images = read_table(filter_validation, tables.ANNOTATION_IMAGES)
    scores = read_labels("image_score", labels)
    unknown = set(scores["item_id"]) - set(images["image_id"])
    if unknown:
        raise ValueError(f"{labels}: scores for images outside the filter validation subset: {sorted(unknown)[:5]}")
    human = scores.groupby("item_id")["score"].mean()  # several people: their mean score
    scored = images[images["image_id"].isin(human.index)].assign(human_score=lambda f: f["image_id"].map(human))
    table = validation(scored, config["annotation"]["human_keep_threshold"])
    log.info("filter validation: %d of %d images scored by people", len(scored), len(images))
    write_report_table(table, csv, markdown, latex, caption="Filter validation: people against the VLM filter")


def human_preferences(
    config: dict[str, Any], preference_pairs: str, labels: str, majority: str, human_row: str, csv: str,
    markdown: str, latex: str,
) -> None:  # fmt: skip
    """Appendix E: the annotators' pairwise kappa matrix, the majority per pair (Table 3's human
    reference) and Table 3's Human row."""
    from blindspot import agreement
    from blindspot.annotation import pairwise_choices, read_labels
    from blindspot.reporting import write_report_table

    pairs = read_table(preference_pairs, tables.ANNOTATION_PAIRS)
    choices = pairwise_choices(read_labels("pairwise", labels), pairs)
    matrix = agreement.annotator_kappas(choices)
    mean = pd.DataFrame([["mean (pairs)", agreement.mean_pairwise_kappa(matrix)] + [""] * (len(matrix) - 1)],
                        columns=["Annotator", *matrix.columns])  # fmt: skip
    shown = pd.concat([matrix.reset_index(names="Annotator").astype(object), mean], ignore_index=True)
    write_report_table(shown, csv, markdown, latex, caption="Pairwise quadratic weighted kappa between annotators")
    votes = agreement.majority_choices(choices)
    write_text(majority, votes[["pair_id", "choice"]].to_csv(index=False))
    row = agreement.human_row(choices, pairs.set_index("pair_id")["domain"])
    write_json(human_row, row)
    log.info("human preferences: %d labels on %d pairs; %d ties", len(choices), len(votes), int(votes["tied"].sum()))


def build_model(recipe: dict[str, Any], seed: int, out: str) -> None:
    from blindspot.tiny_models import build_model as build

    build(out, recipe, seed)


STEPS = {f.__name__: f for f in (make_seeds, generate_triplets, judge_triplets, accept_triplets,
                                 check_prompt_quality, make_table1, render_images, judge_images,
                                 keep_consensus_pairs, measure_image_quality, make_table2, split_benchmark,
                                 export_dataset, score_metric, make_table3, write_scene_questions,
                                 make_humble_questions, answer_humble, make_humble_tables, train_protoscore,
                                 score_transfer, make_annotation_projects, validate_filter, human_preferences,
                                 make_report_items, build_model)}  # fmt: skip
# An API judge's jobs run the same step on the submit host (workflow/rules/metrics.smk).
STEPS["score_api_metric"] = score_metric


def step_arguments(step: Any, job: Any) -> dict[str, Any]:
    """A step's arguments from a Snakemake job: `config`, then outputs, inputs, params, wildcards."""
    sources = [job.output, job.input, job.params, job.wildcards]
    arguments = {}
    for name in inspect.signature(step).parameters:
        if name == "config":
            arguments[name] = job.config
            continue
        # Namedlist is a list: `in` alone would search its values, not its names.
        found = next((source for source in sources if name in source.keys()), None)  # noqa: SIM118
        if found is None:
            raise TypeError(f"rule {job.rule}: step {step.__name__} needs '{name}', which the rule does not name")
        arguments[name] = getattr(found, name)
    return arguments


def run_step(name: str, **arguments: Any) -> None:
    """Run the step `name` as one job. Messages about the job's resources name it, and a job whose
    model finds fewer GPUs than it asks for stops with that one line rather than a traceback."""
    with running_step(name):
        try:
            STEPS[name](**arguments)
        except GPUUnavailable as error:
            raise SystemExit(str(error)) from None


def job_file(log: str) -> Path:
    """Where a job leaves the arguments it ran with: beside its log."""
    return Path(log).with_suffix(".job.json")


def run_from_snakemake(job: Any) -> None:
    setup_logging(job.log[0])
    arguments = step_arguments(STEPS[job.rule], job)
    # So that `python -m blindspot.stages replay FILE` can run the job again outside Snakemake.
    record = {"step": job.rule, "wildcards": dict(job.wildcards.items()), "arguments": arguments}
    write_json(job_file(job.log[0]), record)
    run_step(job.rule, **arguments)


def replay(path: str) -> None:
    """Run a job again from the arguments it left beside its log, in the folder Snakemake ran it in."""
    job = json.loads(Path(path).read_text())
    run_step(job["step"], **job["arguments"])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m blindspot.stages", description=__doc__)
    commands = parser.add_subparsers(dest="step", required=True)
    again = commands.add_parser("replay", help="run a job again from the .job.json file beside its log")
    again.add_argument("job_file")
    readers = {"config": load_config, "recipe": yaml.safe_load}
    for name, step in STEPS.items():
        sub = commands.add_parser(name, help=(step.__doc__ or name).splitlines()[0])
        for param in inspect.signature(step).parameters.values():
            annotation = str(param.annotation)
            sub.add_argument(
                f"--{param.name.replace('_', '-')}",
                required=True,
                type=readers.get(param.name, int if annotation == "int" else str),
                nargs="+" if annotation.startswith("Sequence") else None,
            )
    args = vars(parser.parse_args(argv))
    setup_logging()
    if args["step"] == "replay":
        replay(args["job_file"])
    else:
        run_step(args.pop("step"), **args)


if __name__ == "__main__":
    main()
