"""A metric's job from explicit values: what the score cache knows it by, how it is loaded (or skipped),
which pairs it scores, and the step `score_metric` that ties them together."""

import dataclasses
import json
from typing import ClassVar

import pandas as pd
import pytest
from helpers.outputs import half_written_temps
from helpers.workflow import REPO
from PIL import Image

from blindspot import schemas
from blindspot.io import is_temp_of, read_table, write_table
from blindspot.models.spec import model_spec
from blindspot.plugins import MetricSkipped, Score, plugin_code
from blindspot.protobias.accuracy import read_scores
from blindspot.protobias.metric_scores import (
    ScoreCache,
    image_sha256,
    metric_identity,
    metric_loader,
    metric_score_settings,
    score_or_skip,
    shard_test_pairs,
)
from blindspot.protobias.split import split_of
from blindspot.steps.table3 import score_metric

KEY_ENV = "BLINDSPOT_TINY_API_KEY"


def identity_of(config: dict, metric: str, template: str | None = None, trained: str | None = None) -> dict:
    entry = config["evaluation"]["metrics"][metric]
    spec = model_spec(config, entry["model"])
    settings = metric_score_settings(config["models"], entry)
    return metric_identity(entry, spec, settings, plugin_code(entry["plugin"]), template, trained)


def test_the_identity_is_the_plugin_its_code_args_and_score_settings_as_sorted_json(tiny_config):
    """The version is the string the score cache is keyed by: changing its form scores every cached
    image again (an API judge's replies are cached apart, by what was asked, so none is bought again)."""
    entry = {"plugin": "clip_similarity", "model": "tiny-clip", "args": {"weight": 2.5}, "label": "CLIPScore"}
    registry = {
        "tiny-clip": {"build": {"recipe": "random_clip"}, "backend": "transformers", "gpus": 0, "dtype": "float32"}
    }
    settings = metric_score_settings(registry, entry)
    # The run-only keys left out; a built model's recipe kept (its weights: `built:<name>` is all its id says).
    assert settings == {"model": {"backend": "transformers", "build": {"recipe": "random_clip"}, "dtype": "float32"}}
    code = {"module": "blindspot.metrics.clip_similarity", "version": "SCORE_VERSION 1"}
    identity = metric_identity(entry, model_spec(tiny_config, "tiny-clip"), settings, code)
    assert identity["version"] == (
        '{"args": {"weight": 2.5}, "model": {"backend": "transformers", "build": {"recipe": "random_clip"}, '
        '"dtype": "float32"}, '
        '"plugin": "clip_similarity", "plugin_code": {"module": "blindspot.metrics.clip_similarity", '
        '"version": "SCORE_VERSION 1"}}'
    )
    assert identity["model_id"] == model_spec(tiny_config, "tiny-clip").model_id
    assert identity["revision"] == ""


def test_a_helper_models_settings_are_part_of_the_identity(tiny_config):
    entry = tiny_config["evaluation"]["metrics"]["alignscore"]
    settings = metric_score_settings(tiny_config["models"], entry)
    assert set(settings) == {"model", "models"}
    assert set(settings["models"]) == set(entry["models"])
    before = identity_of(tiny_config, "alignscore")
    captioner = next(iter(entry["models"].values()))
    tiny_config["models"][captioner]["dtype"] = "float16"
    assert identity_of(tiny_config, "alignscore")["version"] != before["version"]


def test_a_built_in_plugins_new_score_version_is_another_metric_to_the_cache(tiny_config, monkeypatch):
    """Fixing how a built-in plug-in scores (and bumping its SCORE_VERSION) scores every pair again:
    the cache would otherwise hand back the old code's scores."""
    import blindspot.metrics.vqa_score as module

    before, clip = identity_of(tiny_config, "vqascore-vlm"), identity_of(tiny_config, "clipscore")
    assert plugin_code("vqa_score") == {"module": module.__name__, "version": f"SCORE_VERSION {module.SCORE_VERSION}"}
    monkeypatch.setattr(module, "SCORE_VERSION", module.SCORE_VERSION + 1)
    assert identity_of(tiny_config, "vqascore-vlm")["version"] != before["version"]
    assert identity_of(tiny_config, "clipscore") == clip  # another plug-in's cache is kept


def test_the_identity_changes_with_the_template_it_is_given(tiny_config, tmp_path):
    template = tmp_path / "judge.yaml"
    template.write_text((REPO / "config" / "prompts" / "judge_semantic_v1.yaml").read_text())
    before = identity_of(tiny_config, "vlm-judge", str(template))
    assert before["version"] != identity_of(tiny_config, "vlm-judge")["version"]
    template.write_text(template.read_text().replace("Answer with the number only.", "Answer with one number."))
    assert identity_of(tiny_config, "vlm-judge", str(template))["version"] != before["version"]


def test_the_identity_follows_score_settings_not_run_settings(tiny_config):
    before = identity_of(tiny_config, "api-judge")
    tiny_config["models"]["local-api-judge"] |= {"client": {"concurrency": 16}, "endpoint": "http://10.0.0.1/v1"}
    assert identity_of(tiny_config, "api-judge") == before  # same answers, another route
    clip = identity_of(tiny_config, "clipscore")
    tiny_config["models"]["tiny-clip"] |= {"weights_gb": 40.0, "gated": True}  # a retry's memory, an access flag
    assert identity_of(tiny_config, "clipscore") == clip
    tiny_config["models"]["local-api-judge"]["request"] = {"temperature": 0.7}
    assert identity_of(tiny_config, "api-judge")["version"] != before["version"]
    clip = identity_of(tiny_config, "clipscore")
    tiny_config["models"]["tiny-clip"]["dtype"] = "float16"
    assert identity_of(tiny_config, "clipscore")["version"] != clip["version"]
    judge = identity_of(tiny_config, "vlm-judge")
    vlm = tiny_config["models"][tiny_config["evaluation"]["metrics"]["vlm-judge"]["model"]]
    vlm["engine_args"] = {"gpu_memory_utilization": 0.7, "max_num_seqs": 8}  # a retry after an out-of-memory error
    assert identity_of(tiny_config, "vlm-judge") == judge
    vlm["engine_args"]["quantization"] = "fp8"  # other weights
    assert identity_of(tiny_config, "vlm-judge")["version"] != judge["version"]


def test_a_retrained_scorer_is_another_metric(tiny_config, tmp_path):
    from blindspot.models.protoscore_model import HEAD_FILE

    trained = tmp_path / "protoscore"
    trained.mkdir()
    (trained / HEAD_FILE).write_bytes(b"head weights")
    first = identity_of(tiny_config, "protoscore", trained=str(trained))
    assert first["version"].startswith(identity_of(tiny_config, "protoscore")["version"] + " trained:")
    (trained / HEAD_FILE).write_bytes(b"other head weights")
    assert identity_of(tiny_config, "protoscore", trained=str(trained))["version"] != first["version"]


@pytest.fixture
def judge_pairs(tmp_path):
    rows = []
    for index, colour in enumerate(("red", "blue")):
        corr, adv = tmp_path / f"c{index}.png", tmp_path / f"a{index}.png"
        Image.new("RGB", (32, 32), colour).save(corr)
        Image.new("RGB", (32, 32), "gray").save(adv)
        rows.append(
            {
                "pair_id": f"p{index}",
                "domain": "objects",
                "neutral_prompt": f"a {colour} square",
                "corr_path": str(corr),
                "adv_path": str(adv),
            }
        )
    return pd.DataFrame(rows)


def test_a_judge_whose_key_the_rule_says_is_unset_is_skipped_before_its_plugin_loads(
    tiny_config, judge_pairs, tmp_path, monkeypatch
):
    """The rule's `api_key_is_set` decides, even where the variable is set in the job's environment."""
    monkeypatch.setenv(KEY_ENV, "sk-set-here")
    entry = tiny_config["evaluation"]["metrics"]["api-judge"]
    spec = model_spec(tiny_config, entry["model"])
    load = metric_loader(entry, spec, {}, 1, str(tmp_path / "cache"), None, api_key_is_set=False)
    with pytest.raises(MetricSkipped, match=f"{KEY_ENV} is not set"):
        load()
    identity = identity_of(tiny_config, "api-judge")
    frame, counters = score_or_skip(judge_pairs, "api-judge", identity, load, ScoreCache(tmp_path / "cache"), 1)
    assert frame.empty
    assert list(frame.columns) == schemas.METRIC_SCORES.names
    assert f"{KEY_ENV} is not set" in counters["skipped"]


def test_a_judge_without_its_key_in_the_environment_is_skipped_by_its_plugin(tiny_config, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    entry = tiny_config["evaluation"]["metrics"]["api-judge"]
    load = metric_loader(entry, model_spec(tiny_config, entry["model"]), {}, 1, str(tmp_path), None, True)
    with pytest.raises(MetricSkipped, match=f"{KEY_ENV} is not set"):
        load()


def test_a_metric_without_a_key_loads_its_plugin_with_its_args_and_helpers(tiny_config, tmp_path, monkeypatch):
    """A metric that needs no key is never skipped; its plug-in gets its args, helper models and folder."""
    from blindspot import plugins

    built = []
    monkeypatch.setitem(plugins.PLUGINS, "recording", f"{__name__}:RecordingMetric")
    monkeypatch.setattr(RecordingMetric, "built", built)
    entry = {"plugin": "recording", "model": "tiny-clip", "args": {"weight": 2.5}}
    spec, helper = model_spec(tiny_config, "tiny-clip"), model_spec(tiny_config, "tiny-qwen2.5-vl")
    metric = metric_loader(entry, spec, {"captioner": helper}, 3, "cache", "trained", api_key_is_set=False)()
    assert isinstance(metric, RecordingMetric)
    assert built == [(spec, 3, {"weight": 2.5, "captioner": helper, "trained": "trained"})]


class RecordingMetric:
    """A plug-in that records how it was built (what is tested is the loader, not a model)."""

    built: ClassVar[list] = []

    def __init__(self, spec, batch_size, **args):
        self.built.append((spec, batch_size, args))


@pytest.mark.parametrize("left", [b"", b'{"raw": 0.5, "det', b'{"raw": 0.5}', b"[]"])
def test_an_entry_a_crash_left_unreadable_is_scored_again(tmp_path, left):
    from blindspot.plugins import Score

    cache = ScoreCache(tmp_path)
    key = ScoreCache.key("clipscore", "built:tiny-clip", "", "v", "sha", "a cat")
    cache.put(key, Score(0.25, {}), (0.0, 2.5))
    assert cache.get(key) == (Score(0.25, {}), (0.0, 2.5))
    cache._path(key).write_bytes(left)  # renamed into place before its data reached the disk
    assert cache.get(key) is None
    cache.put(key, Score(0.5, {}), (0.0, 2.5))
    assert cache.get(key) == (Score(0.5, {}), (0.0, 2.5))


class HalfMetric:
    bounds = (0.0, 1.0)

    def score(self, prompts, images):
        return [Score(0.5, "") for _ in prompts]


def test_a_job_removes_what_a_killed_run_left_of_the_entries_it_scores_and_nothing_else(judge_pairs, tmp_path):
    """The metric's other jobs share the cache folder, each writing its own shard's keys."""
    cache, identity = ScoreCache(tmp_path / "cache"), {"model_id": "m", "revision": "", "version": "v"}
    first = judge_pairs.iloc[0]
    key = ScoreCache.key("half", "m", "", "v", image_sha256(first["corr_path"]), first["neutral_prompt"])
    entry = cache._path(key)
    left, others = half_written_temps(entry, key, '{"raw": 0.')
    assert is_temp_of(left, entry)
    frame, _ = score_or_skip(judge_pairs, "half", identity, HalfMetric, cache, 2)
    assert not left.exists()
    assert others.exists()
    assert cache.get(key) == (Score(0.5, ""), (0.0, 1.0))
    assert list(frame["corr_raw"]) == [0.5, 0.5]


def test_a_shard_scores_the_kept_test_pairs_of_its_own_seeds():
    seed, fraction = 3, 0.5
    ids = [f"s{i}" for i in range(40)]
    test = [s for s in ids if split_of(s, seed, fraction) == "test"][:2]
    train = [s for s in ids if split_of(s, seed, fraction) == "train"][:1]
    triplets = pd.DataFrame({"triplet_id": ["t0", "t1", "t2"], "seed_id": [*test, *train]})
    pairs = pd.DataFrame(
        {
            "pair_id": ["a", "b", "c", "d"],
            "triplet_id": ["t0", "t0", "t1", "t2"],
            "kept": [True, False, True, True],
        }
    )
    chosen = shard_test_pairs(pairs, triplets, pd.Series([test[0], train[0]]), seed, fraction)
    assert list(chosen["pair_id"]) == ["a"]  # b is not kept, c is another shard's seed, d is a train pair
    assert list(shard_test_pairs(pairs, triplets, test, seed, fraction)["pair_id"]) == ["a", "c"]


def write_scores(path, metric, pair_ids):
    rows = [
        {
            "pair_id": p,
            "domain": "objects",
            "metric": metric,
            "model_id": "m",
            "model_revision": "",
            "prompt": "x",
            "corr_raw": 1.0,
            "adv_raw": 0.0,
            "corr_score": 1.0,
            "adv_score": 0.0,
            "corr_detail": "",
            "adv_detail": "",
        }
        for p in pair_ids
    ]
    write_table(path, pd.DataFrame(rows, columns=schemas.METRIC_SCORES.names), schemas.METRIC_SCORES)
    return str(path)


def test_every_metrics_scores_read_as_one_table_skipped_ones_adding_nothing(tmp_path):
    paths = [
        write_scores(tmp_path / "a.parquet", "clip", ["p1", "p2"]),
        write_scores(tmp_path / "b.parquet", "api", []),
        write_scores(tmp_path / "c.parquet", "vqa", ["p1"]),
    ]
    scores = read_scores(paths)
    assert list(zip(scores["metric"], scores["pair_id"], strict=True)) == [
        ("clip", "p1"),
        ("clip", "p2"),
        ("vqa", "p1"),
    ]
    assert list(scores.index) == [0, 1, 2]
    empty = read_scores([paths[1]])
    assert empty.empty
    assert list(empty.columns) == schemas.METRIC_SCORES.names


def test_a_job_importing_other_plugin_code_than_planned_stops_before_scoring(tiny_config, tmp_path):
    """The workflow plans with the plug-in code Snakemake's env has; a job whose env imports another
    version would cache its scores under the planned code's key, so it stops in one line instead."""
    entry = tiny_config["evaluation"]["metrics"]["clipscore"]
    planned = plugin_code(entry["plugin"]) | {"version": "SCORE_VERSION 0"}
    with pytest.raises(
        ValueError,
        match=(
            r"^metric clipscore: the job imports blindspot.metrics.clip_similarity as SCORE_VERSION \d+, the workflow "
            r"planned with SCORE_VERSION 0: install the same version where Snakemake runs and in the job's env$"
        ),
    ):
        score_metric(
            domain="objects",
            metric="clipscore",
            shard="00000",
            pairs="unread",
            triplets="unread",
            seeds="unread",
            template=[],
            trained=[],
            annotated=[],
            out=str(tmp_path / "out.parquet"),
            counters_out=str(tmp_path / "out.json"),
            cache=str(tmp_path / "cache"),
            metric_entry=entry,
            model={},
            models={},
            score_settings={},
            plugin_code=planned,
            api_key_is_set=True,
            split={},
            batch_size=1,
            shard_size=10,
        )
    assert not (tmp_path / "out.parquet").exists()


def test_the_step_skips_a_judge_without_its_key_and_writes_an_empty_shard(
    tiny_config, judge_pairs, tmp_path, monkeypatch
):
    """score_metric from the values its rule passes: a kept test pair of its shard, a judge whose key is
    not set, an empty table and the reason in the counters."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    split = {"seed": tiny_config["seed"], "test_fraction": 0.5}
    seed_id = next(s for s in (f"s{i}" for i in range(100)) if split_of(s, split["seed"], 0.5) == "test")
    seeds = pd.DataFrame({c: [seed_id] if c == "seed_id" else ["x"] for c in schemas.SEEDS.names}).assign(sample_seed=1)
    write_table(tmp_path / "seeds.parquet", seeds, schemas.SEEDS)
    triplet_id = "t0"
    triplet = {f.name: "x" for f in schemas.TRIPLETS} | {
        "triplet_id": triplet_id,
        "seed_id": seed_id,
        "domain": "objects",
    }
    write_table(tmp_path / "triplets.parquet", pd.DataFrame([triplet]), schemas.TRIPLETS)
    pair = {f.name: "x" for f in schemas.PAIRS} | {
        "triplet_id": triplet_id,
        "seed": 1,
        "min_corr_score": 9.0,
        "min_adv_score": 9.0,
        "kept": True,
        "corr_path": judge_pairs["corr_path"][0],
        "adv_path": judge_pairs["adv_path"][0],
    }
    write_table(tmp_path / "pairs.parquet", pd.DataFrame([pair]), schemas.PAIRS)
    entry = tiny_config["evaluation"]["metrics"]["api-judge"]
    score_metric(
        domain="objects",
        metric="api-judge",
        shard="00000",
        pairs=str(tmp_path / "pairs.parquet"),
        triplets=str(tmp_path / "triplets.parquet"),
        seeds=str(tmp_path / "seeds.parquet"),
        template=[str(REPO / entry["args"]["template"])],
        trained=[],
        annotated=[],
        out=str(tmp_path / "out.parquet"),
        counters_out=str(tmp_path / "out.json"),
        cache=str(tmp_path / "cache"),
        metric_entry=entry,
        model=dataclasses.asdict(model_spec(tiny_config, entry["model"])),
        models={},
        score_settings=metric_score_settings(tiny_config["models"], entry),
        plugin_code=plugin_code(entry["plugin"]),
        api_key_is_set=False,
        split=split,
        batch_size=1,
        shard_size=10,
    )
    assert read_table(tmp_path / "out.parquet", schemas.METRIC_SCORES).empty
    counters = json.loads((tmp_path / "out.json").read_text())
    assert f"{KEY_ENV} is not set" in counters["skipped"]
    assert "provenance" in counters


def test_an_api_metrics_job_stops_in_one_line_before_it_sends_more_than_planned(
    tiny_config, judge_pairs, tmp_path, monkeypatch
):
    """A job planned for no request sends none: the step stops naming the metric and the planned number."""
    from blindspot.models.api.client import RequestsExhausted

    monkeypatch.setenv(KEY_ENV, "sk-test")
    split = {"seed": tiny_config["seed"], "test_fraction": 0.5}
    seed_id = next(s for s in (f"s{i}" for i in range(100)) if split_of(s, split["seed"], 0.5) == "test")
    seeds = pd.DataFrame({c: [seed_id] if c == "seed_id" else ["x"] for c in schemas.SEEDS.names}).assign(sample_seed=1)
    write_table(tmp_path / "seeds.parquet", seeds, schemas.SEEDS)
    triplet = {f.name: "x" for f in schemas.TRIPLETS} | {"triplet_id": "t0", "seed_id": seed_id, "domain": "objects"}
    write_table(tmp_path / "triplets.parquet", pd.DataFrame([triplet]), schemas.TRIPLETS)
    pair = {f.name: "x" for f in schemas.PAIRS} | {
        "triplet_id": "t0",
        "seed": 1,
        "min_corr_score": 9.0,
        "min_adv_score": 9.0,
        "kept": True,
        "corr_path": judge_pairs["corr_path"][0],
        "adv_path": judge_pairs["adv_path"][0],
    }
    write_table(tmp_path / "pairs.parquet", pd.DataFrame([pair]), schemas.PAIRS)
    entry = tiny_config["evaluation"]["metrics"]["api-judge"]
    with pytest.raises(RequestsExhausted, match=r"^metric api-judge: .*0 requests x client\.max_attempts") as stopped:
        score_metric(
            domain="objects",
            metric="api-judge",
            shard="00000",
            pairs=str(tmp_path / "pairs.parquet"),
            triplets=str(tmp_path / "triplets.parquet"),
            seeds=str(tmp_path / "seeds.parquet"),
            template=[str(REPO / entry["args"]["template"])],
            trained=[],
            annotated=[],
            out=str(tmp_path / "out.parquet"),
            counters_out=str(tmp_path / "out.json"),
            cache=str(tmp_path / "cache"),
            metric_entry=entry,
            model=dataclasses.asdict(model_spec(tiny_config, entry["model"])),
            models={},
            score_settings=metric_score_settings(tiny_config["models"], entry),
            plugin_code=plugin_code(entry["plugin"]),
            api_key_is_set=True,
            split=split,
            batch_size=1,
            shard_size=10,
            planned_requests=0,
        )
    assert "\n" not in str(stopped.value)
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("asked", [None, "annotated", "test_split"])
def test_an_api_metric_scores_only_the_annotated_pairs_of_its_shard_unless_asked_for_the_whole_split(
    tiny_config, tmp_path, monkeypatch, asked
):
    """By default an API metric's job scores the test pairs of its shard that are annotated pairs (Table 3's),
    with `evaluation.api_metrics_score: test_split` all of them; other metrics and a released dataset (no
    annotated pairs) score the whole split. The rule gives the step the preference pairs only when it filters."""
    from blindspot import targets
    from blindspot.protobias import metric_scores

    if asked:
        tiny_config["evaluation"]["api_metrics_score"] = asked
    split = {"seed": tiny_config["seed"], "test_fraction": 0.5}
    seed_ids = [s for s in (f"s{i}" for i in range(100)) if split_of(s, split["seed"], 0.5) == "test"][:3]
    seeds = pd.DataFrame({c: seed_ids if c == "seed_id" else "x" for c in schemas.SEEDS.names}).assign(sample_seed=1)
    write_table(tmp_path / "seeds.parquet", seeds, schemas.SEEDS)
    triplets = pd.DataFrame(
        [
            {f.name: "x" for f in schemas.TRIPLETS} | {"triplet_id": f"t{i}", "seed_id": seed_id, "domain": "objects"}
            for i, seed_id in enumerate(seed_ids)
        ]
    )
    write_table(tmp_path / "triplets.parquet", triplets, schemas.TRIPLETS)
    pairs = pd.DataFrame(
        [
            {f.name: "x" for f in schemas.PAIRS}
            | {
                "pair_id": f"p{i}",
                "triplet_id": f"t{i}",
                "seed": 1,
                "min_corr_score": 9.0,
                "min_adv_score": 9.0,
                "kept": True,
            }
            for i in range(3)
        ]
    )
    write_table(tmp_path / "pairs.parquet", pairs, schemas.PAIRS)
    # p1 is annotated; q9, another shard's (or domain's) annotated pair, is not among this shard's
    preference = pd.DataFrame([{f.name: "x" for f in schemas.ANNOTATION_PAIRS} | {"pair_id": p} for p in ("p1", "q9")])
    write_table(tmp_path / "preference.parquet", preference, schemas.ANNOTATION_PAIRS)
    scored = []

    def score(test, *_):
        scored.append(list(test["pair_id"]))
        return pd.DataFrame(columns=schemas.METRIC_SCORES.names), {}

    monkeypatch.setattr(metric_scores, "score_or_skip", score)
    entry = tiny_config["evaluation"]["metrics"]["api-judge"]
    filters = targets.scores_annotated_only(tiny_config, "api-judge")
    assert filters == (asked != "test_split")
    assert targets.annotated_only_metrics(tiny_config) == (["api-judge"] if filters else [])
    assert not targets.scores_annotated_only(tiny_config, "clipscore")  # not an API metric
    assert not targets.scores_annotated_only(tiny_config | {"dataset": {"path": "x"}}, "api-judge")
    score_metric(
        domain="objects",
        metric="api-judge",
        shard="00000",
        pairs=str(tmp_path / "pairs.parquet"),
        triplets=str(tmp_path / "triplets.parquet"),
        seeds=str(tmp_path / "seeds.parquet"),
        template=[str(REPO / entry["args"]["template"])],
        trained=[],
        annotated=[str(tmp_path / "preference.parquet")] if filters else [],
        out=str(tmp_path / "out.parquet"),
        counters_out=str(tmp_path / "out.json"),
        cache=str(tmp_path / "cache"),
        metric_entry=entry,
        model=dataclasses.asdict(model_spec(tiny_config, entry["model"])),
        models={},
        score_settings=metric_score_settings(tiny_config["models"], entry),
        plugin_code=plugin_code(entry["plugin"]),
        api_key_is_set=True,
        split=split,
        batch_size=1,
        shard_size=10,
    )
    assert scored == [["p1"] if filters else ["p0", "p1", "p2"]]
