"""The report's items: the stages' counters table and the example grid."""

import json

import pandas as pd
from PIL import Image

from blindspot.protobias.figures import counter_stage, example_grid, example_pairs, stage_counters


def test_a_counters_file_belongs_to_its_sharded_stage_or_to_the_stage_it_is_named_after():
    assert counter_stage("results/tiny/raw/objects/tiny-qwen2/00000.counters.json") == "raw"
    assert counter_stage("results/tiny/metric_scores/objects/clipscore/00001.counters.json") == "metric_scores"
    assert counter_stage("results/tiny/answers/tiny-qwen2.5-vl/base/00000.counters.json") == "answers"
    assert counter_stage("results/tiny/split_benchmark.counters.json") == "split_benchmark"


def test_stage_counters_flattens_every_counter_without_provenance(tmp_path):
    sharded = tmp_path / "judged" / "objects" / "00000.counters.json"
    sharded.parent.mkdir(parents=True)
    sharded.write_text(json.dumps({"kept": 3, "dropped": {"parse": 1, "low": 2}, "provenance": {"git": "abc"}}))
    single = tmp_path / "split_benchmark.counters.json"
    single.write_text(json.dumps({"pairs": 7, "provenance": {"git": "abc"}}))
    table = stage_counters([str(single), str(sharded)])
    assert table.to_dict("records") == [
        {"stage": "split_benchmark", "file": str(single), "counter": "pairs", "value": 7},
        {"stage": "judged", "file": str(sharded), "counter": "kept", "value": 3},
        {"stage": "judged", "file": str(sharded), "counter": "dropped.parse", "value": 1},
        {"stage": "judged", "file": str(sharded), "counter": "dropped.low", "value": 2},
    ]


def test_the_example_grid_leaves_out_a_metric_without_scores(tmp_path):
    corr, adv = tmp_path / "c.png", tmp_path / "a.png"
    Image.new("RGB", (16, 16), "red").save(corr)
    Image.new("RGB", (16, 16), "blue").save(adv)
    pairs = pd.DataFrame(
        [
            {
                "pair_id": pair_id,
                "domain": "objects",
                "split": split,
                "neutral_prompt": "a red square",
                "corr_path": str(corr),
                "adv_path": str(adv),
            }
            for pair_id, split in (("p2", "test"), ("p1", "test"), ("p0", "train"))
        ]
    )
    examples = example_pairs(pairs, per_domain=1)
    assert list(examples["pair_id"]) == ["p1"]  # the first test pair by id; train pairs are never shown
    scores = pd.DataFrame([{"pair_id": "p1", "metric": "clip", "corr_raw": 0.9, "adv_raw": 0.1}])
    example_grid(examples, scores, {"clip": "CLIPScore", "judge": "API judge"}, tmp_path / "with.png")
    example_grid(examples, scores, {"clip": "CLIPScore"}, tmp_path / "without.png")
    example_grid(examples, scores.assign(adv_raw=0.95), {"clip": "CLIPScore"}, tmp_path / "wrong.png")
    assert (tmp_path / "with.png").read_bytes() == (tmp_path / "without.png").read_bytes()
    assert (tmp_path / "wrong.png").read_bytes() != (tmp_path / "without.png").read_bytes()  # the verdict shows


def test_the_example_grid_shows_a_dash_where_a_metric_was_not_asked(tmp_path):
    """An API metric scores only the annotated pairs (evaluation.api_metrics_score): an example it has no score
    for is not shown as its failure."""
    corr, adv = tmp_path / "c.png", tmp_path / "a.png"
    Image.new("RGB", (16, 16), "red").save(corr)
    Image.new("RGB", (16, 16), "blue").save(adv)
    examples = pd.DataFrame(
        [
            {
                "pair_id": "p1",
                "domain": "objects",
                "split": "test",
                "neutral_prompt": "a red square",
                "corr_path": str(corr),
                "adv_path": str(adv),
            }
        ]
    )
    scored = pd.DataFrame(
        [
            {"pair_id": "p1", "metric": "clip", "corr_raw": 0.9, "adv_raw": 0.1},
            {"pair_id": "p9", "metric": "judge", "corr_raw": 0.9, "adv_raw": 0.1},
        ]
    )
    failed = pd.concat([scored, pd.DataFrame([{"pair_id": "p1", "metric": "judge", "corr_raw": 0.1, "adv_raw": 0.9}])])
    labels = {"clip": "CLIPScore", "judge": "API judge"}
    example_grid(examples, scored, labels, tmp_path / "unasked.png")
    example_grid(examples, failed, labels, tmp_path / "failed.png")
    assert (tmp_path / "unasked.png").read_bytes() != (tmp_path / "failed.png").read_bytes()
