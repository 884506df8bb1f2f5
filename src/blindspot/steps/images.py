"""The image stage (workflow/rules/images.smk): render, judge with VLMs, keep the consensus pairs, and
measure their image quality (Table 2)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import schemas
from blindspot.io import read_table, write_table
from blindspot.prompts import PromptTemplate
from blindspot.steps import shard_rows, spec, write_counters


def render_images(
    domain: str,
    t2i: str,
    shard: str,
    triplets: str,
    seeds: str,
    out: str,
    counters_out: str,
    model: dict[str, Any],
    images_dir: str,
    images_per_description: int,
    seed: int,
    batch_size: int,
    shard_size: int,
) -> None:
    """Render the accepted triplets of one seed shard with one text-to-image model."""
    from blindspot.protobias.render import render_triplets, triplets_of_seeds

    seed_ids = shard_rows(read_table(seeds, schemas.SEEDS), shard, shard_size)["seed_id"]
    rows = triplets_of_seeds(read_table(triplets, schemas.TRIPLETS), seed_ids)
    frame, counters = render_triplets(rows, spec(model), images_dir, images_per_description, seed, batch_size)
    write_counters(counters_out, counters, f"{domain}/{t2i}/{shard}")
    write_table(out, frame, schemas.RENDERS)


def judge_images(
    domain: str,
    t2i: str,
    vlm: str,
    shard: str,
    renders: str,
    earlier: Sequence[str],
    template: str,
    out: str,
    counters_out: str,
    model: dict[str, Any],
    earlier_vlms: Sequence[str],
    threshold: float | None,
    score: str | None,
    validation_pool: float | None,
    seed: int | None,
    batch_size: int,
    journal: str,
) -> None:
    """Score the images of one render shard against their own descriptions with one VLM: every image, or,
    after `earlier_vlms` (whose scores of the shard are `earlier`), those of the pairs they all passed and of
    the validation pool (`consensus.still_open`). The scores are journaled as they come (`journal`), so a
    killed job scores only what it had not."""
    from blindspot.models.vlm_scoring import judge_images as judge
    from blindspot.models.vlm_scoring import load_vlm_scorer
    from blindspot.protobias.consensus import still_open

    vlm_spec = spec(model)
    _ = vlm_spec.device  # a job without the GPUs its VLM asks for stops before reading anything
    shard_renders = read_table(renders, schemas.RENDERS)
    scored = shard_renders
    if earlier_vlms:
        before = pd.concat([read_table(path, schemas.VLM_SCORES) for path in earlier], ignore_index=True)
        scored = still_open(shard_renders, before, earlier_vlms, threshold, score, validation_pool, seed)
    if scored.empty:  # the earlier VLMs rejected every pair: nothing this one scores could be kept
        frame, counters = pd.DataFrame(columns=schemas.VLM_SCORES.names), {"images": 0, "computed_items": 0}
    else:
        scorer = load_vlm_scorer(vlm_spec, batch_size)
        frame, counters = judge(scored, scorer, PromptTemplate.load(template), journal)
        Path(journal).unlink()
    counters |= {"images_in_shard": len(shard_renders), "left_to_earlier_vlms": len(shard_renders) - len(scored)}
    write_counters(counters_out, counters, f"{domain}/{t2i}/{vlm}/{shard}")
    write_table(out, frame, schemas.VLM_SCORES)


def keep_consensus_pairs(
    domain: str,
    renders: Sequence[str],
    scores: Sequence[str],
    out: str,
    counters_out: str,
    vlms: Sequence[str],
    threshold: float,
    score: str,
) -> None:
    """Pair each I_corr with its I_adv and keep the pairs that pass every VLM."""
    from blindspot.protobias.consensus import keep_consensus_pairs as keep
    from blindspot.protobias.consensus import pair_images

    pairs, counters = keep(
        pair_images(pd.concat([read_table(p, schemas.RENDERS) for p in renders], ignore_index=True)),
        pd.concat([read_table(p, schemas.VLM_SCORES) for p in scores], ignore_index=True),
        vlms,
        threshold,
        score,
    )
    write_counters(counters_out, counters, domain)
    write_table(out, pairs, schemas.PAIRS)


def measure_image_quality(
    shard: str,
    pairs: str,
    triplets: str,
    seeds: str,
    out: str,
    models: Sequence[dict[str, Any]],
    batch_size: int,
    shard_size: int,
    journals: str,
) -> None:
    """MUSIQ, NIQE (or whatever `iqa_metrics` names) on both images of each kept pair of one shard; each
    metric's scores are journaled a batch at a time (`journals`), so a killed job scores only the rest."""
    from blindspot.protobias.iqa import measure_quality, pairs_to_measure

    seed_ids = shard_rows(read_table(seeds, schemas.SEEDS), shard, shard_size)["seed_id"]
    kept = pairs_to_measure(read_table(pairs, schemas.PAIRS), read_table(triplets, schemas.TRIPLETS), seed_ids)
    frame = measure_quality(kept, [spec(model) for model in models], batch_size, journals)
    write_table(out, frame, schemas.IMAGE_QUALITY)
    shutil.rmtree(journals, ignore_errors=True)


def make_table2(quality: Sequence[str], csv: str, markdown: str, latex: str) -> None:
    """Table 2 from every shard's image-quality table."""
    from blindspot.protobias.iqa import TABLE2_CAPTION, table2
    from blindspot.reporting import write_report_table

    frame = pd.concat([read_table(p, schemas.IMAGE_QUALITY) for p in quality], ignore_index=True)
    write_report_table(table2(frame), csv, markdown, latex, caption=TABLE2_CAPTION)
