"""ProtoScore (`workflow/rules/protoscore.smk`): train the pairwise scorer on the benchmark's train
split, then score an external pairwise set with it. Its Table 3 row comes from `score_metric`."""

from __future__ import annotations

from typing import Any

from blindspot import schemas
from blindspot.io import read_table, write_text
from blindspot.steps import log, spec


def train_protoscore(
    benchmark: str, out: str, checkpoint: str, settings: dict[str, Any], model: dict[str, Any], seed: int
) -> None:
    """Train ProtoScore on the benchmark's train split; resumes from `checkpoint` after a kill."""
    from blindspot.models.protoscore_model import TrainSettings, load_scorer
    from blindspot.protobias import protoscore

    pairs = read_table(benchmark, schemas.BENCHMARK_PAIRS)
    train_pairs = pairs[pairs["split"] == "train"]
    log.info("ProtoScore: %d train pairs of %d", len(train_pairs), len(pairs))
    scorer = load_scorer(spec(model), TrainSettings.from_config(settings, seed))
    history = protoscore.train(scorer, train_pairs, out, checkpoint)
    log.info("ProtoScore trained: %d steps, last loss %.4f", len(history), history["loss"].iloc[-1])


def score_transfer(
    transfer: str, trained: str, out: str, model: dict[str, Any], batch_size: int, bootstrap_samples: int, seed: int
) -> None:
    """ProtoScore on an external pairwise set: pairwise accuracy (ties fail) with a bootstrap interval."""
    from blindspot.metrics.protoscore import ProtoScore
    from blindspot.protobias.protoscore import read_transfer_pairs, transfer_accuracy

    pairs = read_transfer_pairs(transfer)  # a bad set fails before the model loads
    metric = ProtoScore(spec(model), batch_size, trained)
    table = transfer_accuracy(metric, pairs, bootstrap_samples, seed, batch_size)
    write_text(out, table.to_csv(index=False))
    log.info("transfer: %s", table.to_dict("records"))
