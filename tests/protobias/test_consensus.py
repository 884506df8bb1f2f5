import json

import pandas as pd
import pytest

from blindspot.protobias.consensus import keep_consensus_pairs, pair_images


def renders():
    rows = []
    for triplet, seed in (("t1", 1), ("t2", 2)):
        for t2i in ("flux", "sana"):
            for role in ("corr", "adv"):
                rows.append(
                    {
                        "image_id": f"{triplet}-{t2i}-{role}",
                        "triplet_id": triplet,
                        "t2i": t2i,
                        "seed": seed,
                        "role": role,
                        "path": f"/img/{triplet}-{t2i}-{role}.png",
                    }
                )
    return pd.DataFrame(rows)


def scores(values):
    """values: {(image_id, vlm): argmax score}."""
    return pd.DataFrame(
        [{"image_id": i, "vlm": v, "argmax_score": s, "expected_score": s - 0.5} for (i, v), s in values.items()]
    )


def test_pairs_join_corr_and_adv_of_the_same_triplet_model_and_seed():
    pairs = pair_images(renders())
    assert len(pairs) == 4
    row = pairs.set_index(["triplet_id", "t2i"]).loc[("t2", "sana")]
    assert (row["corr_image_id"], row["adv_image_id"]) == ("t2-sana-corr", "t2-sana-adv")
    assert pairs["pair_id"].is_unique
    with pytest.raises(ValueError, match="do not pair up"):
        pair_images(renders().iloc[1:])


def test_a_pair_is_kept_only_when_both_images_pass_every_vlm():
    pairs = pair_images(renders())
    values = {(i, v): 9 for i in renders()["image_id"] for v in ("qwen", "intern")}
    values[("t1-flux-adv", "intern")] = 7  # one VLM fails one image: the pair goes
    values[("t2-sana-corr", "qwen")] = 8  # exactly at the threshold: kept
    values[("t2-flux-corr", "qwen")] = 2
    values[("t2-flux-adv", "qwen")] = 3  # both images fail the same VLM: one rejection for that VLM
    out, counters = keep_consensus_pairs(pairs, scores(values), ["qwen", "intern"], 8, "argmax")
    kept = set(out.loc[out["kept"], "corr_image_id"])
    assert kept == {"t1-sana-corr", "t2-sana-corr"}
    assert counters["pairs_in"] == 4
    assert counters["pairs_kept"] == 2
    assert counters["kept_per_t2i"] == {"sana": 2}
    assert counters["rejections_per_vlm"] == {"qwen": 1, "intern": 1}
    row = out.set_index("corr_image_id").loc["t1-flux-corr"]
    assert json.loads(row["vlm_scores"])["intern"] == {"corr": 9.0, "adv": 7.0}
    assert row["min_adv_score"] == 7


def test_the_threshold_can_apply_to_the_expected_score():
    pairs = pair_images(renders())
    values = {(i, v): 8 for i in renders()["image_id"] for v in ("qwen",)}
    out, _ = keep_consensus_pairs(pairs, scores(values), ["qwen"], 8, "expected")  # expected = 7.5 everywhere
    assert not out["kept"].any()


def test_a_missing_score_is_an_error():
    pairs = pair_images(renders())
    values = {(i, v): 9 for i in renders()["image_id"] for v in ("qwen",)}
    with pytest.raises(ValueError, match="lack a score"):
        keep_consensus_pairs(pairs, scores(values), ["qwen", "intern"], 8, "argmax")
