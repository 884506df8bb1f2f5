"""ProtoScore: a VLM adapted into a pairwise image-text scorer s(T, I), trained on the benchmark's
train split so that s(T, I_corr) > s(T, I_adv); and its pairwise accuracy on an external set (transfer).

The model (`models.protoscore_model`) is the VLM with LoRA adapters on its language model's projections
and a learned scalar head on the last token's final hidden state. The loss is the pairwise softplus
ranking loss with a margin, log(1 + exp(margin - (s_corr - s_adv))). Training follows the paper's
settings (config `protoscore:`): AdamW, cosine schedule with linear warm-up, gradient clipping, the
frozen base in bf16 under bf16 autocast with the trained adapters and head in float32, batches of one
pair with gradient accumulation, images resized to a square, the prompt cut to a token budget.

A micro-batch that runs out of GPU memory is made in parts (`images.Backoff`), their gradients weighted by
their share of it: the optimizer step is the same, to float rounding.

Checkpoints (adapter, head, optimizer, scheduler, RNG states and position) are written atomically as
training goes; a run that finds one of the same run (base model, settings and training pairs) resumes
from it and ends with the weights an uninterrupted run would have (a checkpoint the kill left half-written
is removed first). A checkpoint of another run is discarded, and a finished run removes its checkpoint.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from blindspot.images import Backoff
from blindspot.io import atomic_dir, atomic_path, jsonl_records, read_csv, remove_temps_in, stable_id, write_text
from blindspot.models.protoscore_model import ADAPTER_DIR, HEAD_FILE, PairwiseScorer, save_trained

log = logging.getLogger(__name__)


def ranking_loss(s_corr: Any, s_adv: Any, margin: float) -> Any:
    """Mean of softplus(margin - (s_corr - s_adv)): near zero once s_corr leads s_adv by well over the margin."""
    import torch

    return torch.nn.functional.softplus(margin - (s_corr - s_adv)).mean()


def split_heldout(pairs: pd.DataFrame, fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training pairs, held-out pairs): a seed's pairs are held out together, by a hash of its id, as the
    benchmark splits (a seed's triplets are near-copies), so the slice is stable and no held-out pair has a
    near-copy (another render, or another generator's triplet of its seed) in training."""
    held = pairs["seed_id"].map(
        lambda seed_id: int(stable_id(seed, "heldout", seed_id), 16) % 10_000 < fraction * 10_000
    )
    return pairs[~held].reset_index(drop=True), pairs[held].reset_index(drop=True)


def pairwise_accuracy(scorer: PairwiseScorer, pairs: pd.DataFrame, batch_size: int) -> float:
    """Share of pairs with s(T, I_corr) > s(T, I_adv) (ties fail); NaN without pairs."""
    import torch
    from PIL import Image

    if pairs.empty:
        return math.nan
    right = 0
    scorer.model.eval()
    with torch.inference_mode():
        for start in range(0, len(pairs), batch_size):
            chunk = pairs.iloc[start : start + batch_size]
            prompts = list(chunk["neutral_prompt"])
            corr = scorer.scores(prompts, [Image.open(p) for p in chunk["corr_path"]])
            adv = scorer.scores(prompts, [Image.open(p) for p in chunk["adv_path"]])
            right += int((corr > adv).sum())
    return right / len(pairs)


def _order(n: int, epochs: int, seed: int) -> list[int]:
    """Pair indices in training order: a seeded permutation per epoch."""
    rng = np.random.default_rng(seed)
    return [int(i) for _ in range(epochs) for i in rng.permutation(n)]


def _schedule(optimizer: Any, total_steps: int, warmup_fraction: float) -> Any:
    from transformers import get_cosine_schedule_with_warmup

    return get_cosine_schedule_with_warmup(optimizer, math.ceil(warmup_fraction * total_steps), total_steps)


def _trainable(scorer: PairwiseScorer) -> list[Any]:
    return [p for p in scorer.model.parameters() if p.requires_grad] + list(scorer.head.parameters())


def _add_gradients(scorer: PairwiseScorer, of: int, pairs: list[tuple[str, str, str, str]]) -> list:
    """Forward and backward of some of a micro-batch's `of` pairs (pair_id, neutral_prompt, corr_path, adv_path):
    their mean ranking loss, weighted by their share of the micro-batch, so that the parts' gradients add up to the
    whole micro-batch's. They are added to the trained parameters' only once the backward has finished: a part that
    runs out of memory midway leaves none behind. Per pair, its part's loss (their mean is the micro-batch's)."""
    import torch
    from PIL import Image

    _, prompts, corr, adv = (list(column) for column in zip(*pairs, strict=True))
    s_corr = scorer.scores(prompts, [Image.open(p) for p in corr])
    s_adv = scorer.scores(prompts, [Image.open(p) for p in adv])
    loss = ranking_loss(s_corr, s_adv, scorer.settings.margin)
    trained = _trainable(scorer)
    # allow_unused: a parameter outside the graph keeps no gradient, as under backward()
    gradients = torch.autograd.grad(loss * (len(pairs) / of) / scorer.settings.accumulation, trained, allow_unused=True)
    for parameter, gradient in zip(trained, gradients, strict=True):
        if gradient is None:
            continue
        if parameter.grad is None:
            parameter.grad = gradient
        else:
            parameter.grad += gradient
    return [loss.item()] * len(pairs)


def _save_checkpoint(
    scorer: PairwiseScorer,
    optimizer: Any,
    scheduler: Any,
    position: int,
    history: list,
    checkpoint: Path,
    run_key: str,
    fits: int | None,
) -> None:
    """A new folder per checkpoint, then `latest` names it (both written atomically), then the older
    folders go: a kill at any moment leaves a complete checkpoint that `latest` names."""
    import shutil

    import torch

    name = f"position-{position:09d}"
    with atomic_dir(checkpoint / name) as tmp:
        save_trained(scorer, tmp)
        torch.save(
            {
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "position": position,
                "rng": torch.get_rng_state(),
                "history": history,
                "run_key": run_key,
                "fits": fits,  # the most pairs a micro-batch's part ran with: a retry starts there
                # LoRA dropout on a GPU draws from the CUDA generators
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            tmp / "state.pt",
        )
    write_text(checkpoint / "latest", name + "\n")
    for old in checkpoint.glob("position-*"):
        if old.name != name:
            shutil.rmtree(old)


def latest_checkpoint(checkpoint: str | Path) -> Path | None:
    """The folder of the last complete checkpoint, if there is one: not where `latest` survived a kill
    while the folders were being removed (a new run's mismatch, or the end of training)."""
    pointer = Path(checkpoint) / "latest"
    folder = Path(checkpoint) / pointer.read_text().strip() if pointer.is_file() else None
    return folder if folder is not None and (folder / "state.pt").is_file() else None


def _load_checkpoint(
    scorer: PairwiseScorer, optimizer: Any, scheduler: Any, checkpoint: Path, state: Mapping[str, Any]
) -> tuple[int, list]:
    """Weights from the `checkpoint` folder, and the rest from its `state` (state.pt, already read)."""
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter = checkpoint / ADAPTER_DIR
    weights = next(adapter.glob("adapter_model.*"))
    set_peft_model_state_dict(
        scorer.model, load_file(weights) if weights.suffix == ".safetensors" else torch.load(weights)
    )
    scorer.head.load_state_dict(load_file(checkpoint / HEAD_FILE))
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    if state["cuda_rng"]:
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return state["position"], state["history"]


def train(
    scorer: PairwiseScorer,
    pairs: pd.DataFrame,
    out: str | Path,
    checkpoint: str | Path,
    stop_after_steps: int | None = None,
) -> pd.DataFrame:
    """Train on `pairs` (neutral_prompt, corr_path, adv_path, pair_id, seed_id), resuming from `checkpoint` when it
    holds one of this run; write the adapter, the head and the training log to `out`. `stop_after_steps` stops
    after that many optimizer steps in this call (a preemption, for the resume test). Returns the log:
    one row per optimizer step (loss, learning rate, pairs per second) and per evaluation
    (held-out pairwise accuracy)."""
    import shutil

    import torch

    settings = scorer.settings
    train_pairs, heldout = split_heldout(pairs, settings.heldout_fraction, settings.seed)
    if train_pairs.empty:
        raise ValueError("no training pairs: the train split is empty, or all of it is held out")
    order = _order(len(train_pairs), settings.epochs, settings.seed)
    micro = [order[i : i + settings.batch_size] for i in range(0, len(order), settings.batch_size)]
    total_steps = math.ceil(len(micro) / settings.accumulation)
    optimizer = torch.optim.AdamW(_trainable(scorer), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    scheduler = _schedule(optimizer, total_steps, settings.warmup_fraction)
    checkpoint = Path(checkpoint)
    # The pairs trained on and held out, not only all pairs: how the slice is drawn may change.
    run_key = stable_id(scorer.base, settings.__dict__, sorted(train_pairs["pair_id"]), sorted(heldout["pair_id"]))
    position, history = (0, [])
    # A kill mid-checkpoint leaves a half-written folder or pointer; only this job writes the checkpoint folder.
    stale = remove_temps_in(checkpoint)
    if stale:
        log.info("removed %d temporary file(s) a killed run left in %s", len(stale), checkpoint)
    last = latest_checkpoint(checkpoint)
    state = torch.load(last / "state.pt", weights_only=False) if last is not None else None
    if state is not None and state["run_key"] != run_key:
        log.warning("%s is a checkpoint of another run (base model, settings or pairs differ): starting afresh", last)
        shutil.rmtree(checkpoint)
        state = None
    if state is not None:
        position, history = _load_checkpoint(scorer, optimizer, scheduler, last, state)
        log.info("resuming from %s at micro-batch %d of %d", last, position, len(micro))
    backoff = Backoff(f"ProtoScore training of {scorer.base}", state.get("fits") if state else None)
    steps_this_call, started, pairs_done, running = 0, time.monotonic(), 0, []
    scorer.model.train()
    while position < len(micro):
        rows = train_pairs.iloc[micro[position]]
        micro_batch = rows[["pair_id", "neutral_prompt", "corr_path", "adv_path"]].itertuples(index=False, name=None)
        losses = backoff.run(functools.partial(_add_gradients, scorer, len(rows)), list(micro_batch))
        running.append(float(np.mean(losses)))
        pairs_done += len(rows)
        position += 1
        if position % settings.accumulation and position < len(micro):
            continue
        torch.nn.utils.clip_grad_norm_(_trainable(scorer), settings.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step = math.ceil(position / settings.accumulation)
        history.append(
            {
                "step": step,
                "loss": float(np.mean(running)),
                "learning_rate": scheduler.get_last_lr()[0],
                "pairs_per_second": pairs_done / max(time.monotonic() - started, 1e-9),
                "heldout_accuracy": math.nan,
            }
        )
        log.info("step %d/%d: loss %.4f, lr %.2e", step, total_steps, history[-1]["loss"], history[-1]["learning_rate"])
        running, steps_this_call = [], steps_this_call + 1
        if step % settings.checkpoint_every == 0 or position == len(micro):
            history[-1]["heldout_accuracy"] = pairwise_accuracy(scorer, heldout, settings.batch_size)
            scorer.model.train()
            _save_checkpoint(scorer, optimizer, scheduler, position, history, checkpoint, run_key, backoff.fits)
        if stop_after_steps is not None and steps_this_call >= stop_after_steps and position < len(micro):
            return pd.DataFrame(history)
    out = Path(out)
    with atomic_dir(out) as tmp:
        save_trained(scorer, tmp)
        frame = pd.DataFrame(history)
        write_text(tmp / "training_log.csv", frame.to_csv(index=False))
        trained = {**settings.__dict__, "base_model": scorer.base}
        write_text(tmp / "settings.json", json.dumps(trained, indent=2, default=list) + "\n")
        plot_training(frame, tmp / "loss_curve.png")
    shutil.rmtree(checkpoint, ignore_errors=True)
    return frame


TRANSFER_COLUMNS = ("prompt", "preferred", "other")


def read_transfer_pairs(path: str | Path) -> pd.DataFrame:
    """An external pairwise set: a CSV or JSON-lines file with `prompt`, `preferred` and `other` (image
    paths, relative to the file's folder), and optionally `pair_id` and `group` (accuracy per group)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        frame = pd.DataFrame([record for _, record in jsonl_records(path)])
    else:
        frame = read_csv(path, "transfer pairs", dtype=str)
    missing = set(TRANSFER_COLUMNS) - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: transfer pairs lack columns {sorted(missing)} (need {', '.join(TRANSFER_COLUMNS)})")
    for column in ("preferred", "other"):
        frame[column] = [str(path.parent / image) for image in frame[column]]
        absent = [image for image in frame[column] if not Path(image).is_file()]
        if absent:
            raise FileNotFoundError(f"{path}: {len(absent)} {column} image(s) missing, first {absent[0]}")
    if "group" not in frame:
        frame["group"] = "all"
    return frame


def transfer_accuracy(metric: Any, pairs: pd.DataFrame, n_boot: int, seed: int, batch_size: int) -> pd.DataFrame:
    """Pairwise accuracy (right only when s(T, preferred) > s(T, other); ties fail), overall and per
    group, with a 95% bootstrap interval. Images are read and scored `batch_size` at a time."""
    from blindspot.bootstrap import bootstrap_accuracy
    from blindspot.plugins import score_batches

    prompts = list(pairs["prompt"])
    preferred, other = (
        [
            score
            for batch in score_batches(metric, "protoscore", prompts, list(pairs[column]), batch_size)
            for score in batch
        ]
        for column in ("preferred", "other")
    )
    right = pd.Series([a.raw > b.raw for a, b in zip(preferred, other, strict=True)], index=pairs.index)
    rows = []
    for group, members in [("overall", pairs.index), *pairs.groupby("group", sort=True).groups.items()]:
        estimate = bootstrap_accuracy(right.loc[members], n_boot=n_boot, seed=seed)
        rows.append(
            {
                "group": group,
                "pairs": len(members),
                "accuracy": estimate.value,
                "accuracy_low": estimate.low,
                "accuracy_high": estimate.high,
            }
        )
    return pd.DataFrame(rows)


def plot_training(history: pd.DataFrame, path: str | Path) -> None:
    """Loss per optimizer step, and held-out pairwise accuracy where it was measured."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.5, 4.0), dpi=150, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.plot(history["step"], history["loss"], label="ranking loss")
    axes.set_xlabel("optimizer step")
    axes.set_ylabel("loss")
    measured = history.dropna(subset=["heldout_accuracy"])
    if len(measured):
        twin = axes.twinx()
        twin.plot(measured["step"], measured["heldout_accuracy"], "o--", color="C1", label="held-out accuracy")
        twin.set_ylim(0, 1)
        twin.set_ylabel("held-out pairwise accuracy")
    axes.set_title("ProtoScore training")
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
