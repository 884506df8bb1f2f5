"""The prompt stage (`workflow/rules/prompts.smk`): taxonomy -> seeds -> LLM triplets -> LLM judges ->
unanimous accept -> prompt quality -> Table 1."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import schemas
from blindspot.io import read_table, write_table
from blindspot.prompts import PromptTemplate
from blindspot.steps import log, shard_rows, spec, write_counters, write_shard


def make_seeds(taxonomy: str, domain: str, n_seeds: int, seed: int, out: str) -> None:
    """Sample a domain's seeds from its taxonomy."""
    from blindspot.protobias.taxonomy import sample_seeds

    seeds = sample_seeds(taxonomy, domain, n_seeds, seed)
    write_table(out, seeds, schemas.SEEDS)
    log.info("%s: %d seeds from %s", domain, len(seeds), taxonomy)


def generate_triplets(
    seeds: str,
    template: str,
    model: dict[str, Any],
    shard_size: int,
    batch_size: int,
    seed: int,
    domain: str,
    generator: str,
    shard: str,
    out: str,
    counters_out: str,
) -> None:
    """Write one triplet per seed of a shard with one generator LLM."""
    from blindspot.models.textgen import load_text_generator
    from blindspot.protobias.triplets import generate_triplets as generate

    rows = shard_rows(read_table(seeds, schemas.SEEDS), shard, shard_size)
    engine = load_text_generator(spec(model), seed=seed + int(shard), batch_size=batch_size)
    frame, counters = generate(rows, engine, PromptTemplate.load(template))
    write_shard(frame, counters, schemas.RAW_TRIPLETS, out, counters_out, f"{domain}/{generator}/{shard}")


def judge_triplets(
    triplets: str,
    seeds: str,
    template: str,
    model: dict[str, Any],
    batch_size: int,
    seed: int,
    domain: str,
    judge: str,
    generator: str,
    shard: str,
    out: str,
    counters_out: str,
) -> None:
    """Judge the valid triplets of one generator shard with one judge LLM."""
    from blindspot.models.textgen import load_text_generator
    from blindspot.protobias.judging import judge_triplets as judge_all

    engine = load_text_generator(spec(model), seed=seed + int(shard), batch_size=batch_size)
    frame, counters = judge_all(
        read_table(triplets, schemas.RAW_TRIPLETS),
        read_table(seeds, schemas.SEEDS),
        engine,
        PromptTemplate.load(template),
    )
    write_shard(frame, counters, schemas.JUDGMENTS, out, counters_out, f"{domain}/{judge}/{generator}/{shard}")


def accept_triplets(
    seeds: str,
    raw: Sequence[str],
    judgments: Sequence[str],
    judges: Sequence[str],
    domain: str,
    out: str,
    counters_out: str,
) -> None:
    """Keep a domain's triplets that every judge accepted."""
    from blindspot.protobias.judging import accept_unanimous

    kept, counters = accept_unanimous(
        pd.concat([read_table(path, schemas.RAW_TRIPLETS) for path in raw], ignore_index=True),
        pd.concat([read_table(path, schemas.JUDGMENTS) for path in judgments], ignore_index=True),
        read_table(seeds, schemas.SEEDS),
        list(judges),
    )
    write_counters(counters_out, counters, f"{domain}: accepted triplets", judges=list(judges))
    write_table(out, kept, schemas.TRIPLETS)


def check_prompt_quality(
    triplets: str, embedding_model: dict[str, Any], nli_model: dict[str, Any], batch_size: int, out: str
) -> None:
    """Score a domain's accepted triplets: embedding similarities and NLI labels."""
    from blindspot.protobias.quality import score_prompt_quality

    frame = score_prompt_quality(
        read_table(triplets, schemas.TRIPLETS), spec(embedding_model), spec(nli_model), batch_size
    )
    write_table(out, frame, schemas.PROMPT_QUALITY)


def make_table1(quality: Sequence[str], csv: str, markdown: str, latex: str) -> None:
    """Table 1 from every domain's prompt-quality table."""
    from blindspot.protobias.quality import TABLE1_CAPTION, table1
    from blindspot.reporting import write_report_table

    # A domain's table sits in its domain's folder (`prompt_quality` in blindspot.targets).
    frames = {Path(path).parent.name: read_table(path, schemas.PROMPT_QUALITY) for path in quality}
    write_report_table(
        table1(frames),
        csv,
        markdown,
        latex,
        caption=TABLE1_CAPTION,
    )
