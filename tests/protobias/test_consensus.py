import json

import numpy as np
import pandas as pd
import pytest

from blindspot.protobias.consensus import in_validation_pool, keep_consensus_pairs, pair_images, still_open


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


def test_in_order_a_later_vlm_scores_only_what_the_earlier_passed_and_the_same_pairs_are_kept():
    """The filter is an AND: the second VLM scoring only the pairs the first passed (and the validation pool's)
    keeps the pairs that both scoring every image keep, and the counters say how many scores it saved."""
    many = pd.concat([renders().assign(triplet_id=lambda f, k=k: f["triplet_id"] + f"-{k}") for k in range(10)])
    many["image_id"] = many["triplet_id"] + "-" + many["t2i"] + "-" + many["role"]
    pairs = pair_images(many)
    rng = np.random.default_rng(3)
    every = {(i, v): int(rng.integers(5, 11)) for i in many["image_id"] for v in ("qwen", "intern")}
    first = {key: value for key, value in every.items() if key[1] == "qwen"}
    pooled = set(pairs["pair_id"][in_validation_pool(pairs["pair_id"], 0.25, seed=1)])
    assert 0 < len(pooled) < len(pairs)
    open_renders = still_open(many, scores(first), ["qwen"], 8, "argmax", 0.25, seed=1)
    passed = pairs[
        [
            first[(c, "qwen")] >= 8 and first[(a, "qwen")] >= 8
            for c, a in zip(pairs["corr_image_id"], pairs["adv_image_id"], strict=True)
        ]
    ]
    open_pairs = set(passed["pair_id"]) | pooled
    expected = set(pairs.loc[pairs["pair_id"].isin(open_pairs), ["corr_image_id", "adv_image_id"]].to_numpy().ravel())
    assert set(open_renders["image_id"]) == expected
    second = {(i, "intern"): every[(i, "intern")] for i in open_renders["image_id"]}
    ordered, counters = keep_consensus_pairs(pairs, scores(first | second), ["qwen", "intern"], 8, "argmax")
    whole, whole_counters = keep_consensus_pairs(pairs, scores(every), ["qwen", "intern"], 8, "argmax")
    assert ordered["kept"].tolist() == whole["kept"].tolist()
    assert ordered["kept"].any()
    assert counters["pairs_kept"] == whole_counters["pairs_kept"]
    assert counters["scores_saved"] == 2 * (len(pairs) - len(open_pairs)) > 0
    assert whole_counters["scores_saved"] == 0
    # a pair the first VLM rejected holds the first's scores only; the pool's hold both
    rejected = ordered[~ordered["pair_id"].isin(open_pairs)].iloc[0]
    assert set(json.loads(rejected["vlm_scores"])) == {"qwen"}
    pool_pair = ordered[ordered["pair_id"].isin(pooled)].iloc[0]
    assert set(json.loads(pool_pair["vlm_scores"])) == {"qwen", "intern"}
    # a later VLM's missing score where the earlier one passed the pair is no saving: an error
    lost = (passed.iloc[0]["corr_image_id"], "intern")  # of a pair the first VLM passed
    with pytest.raises(ValueError, match="no earlier VLM rejected"):
        keep_consensus_pairs(
            pairs, scores(first | {k: v for k, v in second.items() if k != lost}), ["qwen", "intern"], 8, "argmax"
        )
