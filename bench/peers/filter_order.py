"""The VLM filter in order (issue 45): the tiny preset's two filter VLMs (tiny Qwen2.5-VL, then tiny
InternVL3, through the project's `judge_images`) score the images of noise-image pairs, either every VLM
every image (`image_stage.filter_order: every`, the peer) or the second only the pairs the first passed and
the validation pool (`sequential`, `consensus.still_open`). The threshold on the expected score is set where
both VLMs keep the paper config's share of the pairs (0.613), as a real filter does at paper scale; random
VLMs cannot judge, so the tiny preset's own threshold (1) keeps every pair and saves nothing. Agreement: the
same kept pairs. The detail counts the scores each arm computed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from PIL import Image
from timing import Row, timed_arms
from tiny_preset import REPO, build_models

from blindspot.models.spec import model_spec
from blindspot.models.vlm_scoring import judge_images, load_vlm_scorer
from blindspot.prompts import PromptTemplate
from blindspot.protobias.consensus import keep_consensus_pairs, pair_images, still_open

PAIRS = 48
SCORE = "expected"
POOL_SEED = 0


def noise_renders(folder: Path) -> pd.DataFrame:
    """`PAIRS` pairs of 64-px noise images, each image with its own description, as a render shard lists them."""
    rng = np.random.default_rng(0)
    rows = []
    for n in range(PAIRS):
        for role in ("corr", "adv"):
            path = folder / f"{n}-{role}.png"
            Image.fromarray(rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)).save(path)
            rows.append(
                {
                    "image_id": f"{n}-{role}",
                    "triplet_id": f"t{n}",
                    "role": role,
                    "description": f"a photo of {'a red' if role == 'corr' else 'a blue'} object number {n}",
                    "t2i": "noise",
                    "seed": 0,
                    "path": str(path),
                }
            )
    return pd.DataFrame(rows)


def compare(config: dict[str, Any], repeats: int) -> list[Row]:
    stage = config["image_stage"]
    vlms = stage["vlms"][:2]
    build_models(config, set(vlms))
    paper = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["image_stage"]
    paper_keep, pool = paper["expected_acceptance"], paper["validation_pool"]
    template = PromptTemplate.load(REPO / stage["judge_template"])
    scorers = {vlm: load_vlm_scorer(model_spec(config, vlm), stage["judge_batch_size"]) for vlm in vlms}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        renders = noise_renders(folder)
        pairs = pair_images(renders)

        def scores(vlm: str, images: pd.DataFrame) -> pd.DataFrame:
            journal = folder / f"{vlm}.journal.jsonl"
            frame, _ = judge_images(images, scorers[vlm], template, journal)
            journal.unlink()
            return frame

        # Where the pair share both VLMs pass is the paper's keep rate: the quantile of each pair's lowest score.
        calibration = pd.concat([scores(vlm, renders) for vlm in vlms]).pivot_table(
            index="image_id", columns="vlm", values=f"{SCORE}_score"
        )[vlms]
        lowest = np.minimum(
            calibration.loc[pairs["corr_image_id"]].to_numpy(), calibration.loc[pairs["adv_image_id"]].to_numpy()
        )
        threshold = float(np.quantile(lowest.min(axis=1), 1 - paper_keep))
        # Random VLMs score on scales of their own: the stricter goes first, as a user would order real ones.
        passes = dict(zip(vlms, (lowest >= threshold).mean(axis=0), strict=True))
        first, second = sorted(vlms, key=passes.get)

        def every() -> tuple[pd.DataFrame, int]:
            both = pd.concat([scores(first, renders), scores(second, renders)], ignore_index=True)
            return keep_consensus_pairs(pairs, both, [first, second], threshold, SCORE)[0], len(both)

        def sequential() -> tuple[pd.DataFrame, int]:
            earlier = scores(first, renders)
            later = scores(second, still_open(renders, earlier, [first], threshold, SCORE, pool, POOL_SEED))
            both = pd.concat([earlier, later], ignore_index=True)
            return keep_consensus_pairs(pairs, both, [first, second], threshold, SCORE)[0], len(both)

        peer, ours = timed_arms([every, sequential], repeats)
    (peer_pairs, peer_scores), (our_pairs, our_scores) = peer.result, ours.result
    kept = set(peer_pairs.loc[peer_pairs["kept"], "pair_id"])
    return [
        Row(
            what=f"VLM filter, {PAIRS} pairs, 2 VLMs",
            peer="every VLM scores every image",
            peer_seconds=peer.seconds,
            ours_seconds=ours.seconds,
            agree=kept == set(our_pairs.loc[our_pairs["kept"], "pair_id"]),
            detail=(
                f"{len(kept)}/{PAIRS} pairs kept by both arms' rule; scores computed: {peer_scores} every, "
                f"{our_scores} in order ({peer_scores - our_scores} saved); the first VLM passes "
                f"{passes[first]:.2f} of the pairs ({first}; {second} {passes[second]:.2f}) at expected score >= "
                f"{threshold:.3f}, set where both keep the paper config's {paper_keep}; validation pool {pool}"
            ),
        )
    ]
