"""The prompt stage's steps (`blindspot.steps.prompts`): each reads what its rule names and writes its
tables; the logic they call is tested with its module (test_taxonomy, test_triplets, test_judging,
test_quality)."""

import dataclasses
import json

import pandas as pd
import pytest
from helpers.workflow import REPO

from blindspot import schemas
from blindspot.io import read_table, write_table
from blindspot.models.spec import model_spec
from blindspot.protobias.taxonomy import sample_seeds
from blindspot.protobias.triplets import ShardFailedError
from blindspot.steps.prompts import accept_triplets, generate_triplets, make_seeds, make_table1

OBJECTS = REPO / "config" / "taxonomy" / "objects.yaml"


@pytest.fixture
def seeds_file(tmp_path):
    path = tmp_path / "seeds.parquet"
    write_table(path, sample_seeds(OBJECTS, "objects", 4, 3), schemas.SEEDS)
    return path


def test_make_seeds_writes_the_sampled_seeds(tmp_path):
    out = tmp_path / "seeds.parquet"
    make_seeds(str(OBJECTS), "objects", 5, 11, str(out))
    pd.testing.assert_frame_equal(read_table(out, schemas.SEEDS), sample_seeds(OBJECTS, "objects", 5, 11))


def raw_triplet(triplet_id, seed_id, status="ok"):
    return dict.fromkeys(schemas.RAW_TRIPLETS.names, "") | {
        "triplet_id": triplet_id,
        "seed_id": seed_id,
        "domain": "objects",
        "generator": "g1",
        "model_id": "hub/g1",
        "template_version": "generate/v1+ab",
        "status": status,
    }


def verdict(triplet_id, judge, accept):
    return dict.fromkeys(schemas.JUDGMENTS.names, "") | {
        "triplet_id": triplet_id,
        "domain": "objects",
        "generator": "g1",
        "judge": judge,
        "accept": accept,
        "status": "ok",
        "verdict_reason": "ok" if accept else "wrong_domain",
    }


def test_accept_triplets_pools_every_shard_and_judge_and_counts_with_the_judges(seeds_file, tmp_path):
    ids = list(read_table(seeds_file, schemas.SEEDS)["seed_id"])
    shards = {
        "00000": [raw_triplet("t1", ids[0]), raw_triplet("t2", ids[1], status="wrong_instance")],
        "00001": [raw_triplet("t3", ids[2]), raw_triplet("t4", ids[3])],
    }
    verdicts = {
        "j1": [verdict("t1", "j1", True), verdict("t3", "j1", True), verdict("t4", "j1", True)],
        "j2": [verdict("t1", "j2", True), verdict("t3", "j2", True), verdict("t4", "j2", False)],
    }
    raw, judgments = [], []
    for name, rows in shards.items():
        raw.append(str(tmp_path / f"raw_{name}.parquet"))
        write_table(raw[-1], pd.DataFrame(rows), schemas.RAW_TRIPLETS)
    for name, rows in verdicts.items():
        judgments.append(str(tmp_path / f"judged_by_{name}.parquet"))
        write_table(judgments[-1], pd.DataFrame(rows), schemas.JUDGMENTS)
    out, counters_out = tmp_path / "triplets.parquet", tmp_path / "triplets.counters.json"
    accept_triplets(str(seeds_file), raw, judgments, ["j1", "j2"], "objects", str(out), str(counters_out))
    kept = read_table(out, schemas.TRIPLETS)
    assert list(kept["triplet_id"]) == ["t1", "t3"]
    assert set(kept["judges"]) == {"j1,j2"}
    counters = json.loads(counters_out.read_text())
    assert (counters["generated"], counters["valid"], counters["accepted"]) == (4, 3, 2)
    assert counters["rejections_per_judge"] == {"j2": {"wrong_domain": 1}}
    assert counters["provenance"]["judges"] == ["j1", "j2"]


def quality_table(domain, similarity, n):
    return pd.DataFrame(
        {
            "triplet_id": [f"{domain}{i}" for i in range(n)],
            "domain": domain,
            "sim_t_dc": similarity,
            "sim_t_da": similarity,
            "sim_dc_da": similarity,
            "nli_t_dc": "entailment",
            "nli_t_da": "neutral",
            "contradiction_dc_da": 0.9,
            "nli_dc_da": "contradiction",
            "embedding_model_id": "e",
            "nli_model_id": "n",
        }
    )


def test_make_table1_names_each_column_after_its_domain_folder(tmp_path):
    paths = []
    for domain, similarity, n in (("animals", 0.5, 1), ("objects", 0.8, 3)):
        paths.append(str(tmp_path / domain / "prompt_quality.parquet"))
        write_table(paths[-1], quality_table(domain, similarity, n), schemas.PROMPT_QUALITY)
    csv, markdown, latex = (tmp_path / f"table1.{ext}" for ext in ("csv", "md", "tex"))
    make_table1(paths, str(csv), str(markdown), str(latex))
    table = pd.read_csv(csv).set_index("check")
    assert list(table.columns) == ["group", "Animals", "Objects", "Overall"]
    assert table.loc["sim(T, D_c)", "Objects"] == pytest.approx(0.8)
    assert table.loc["sim(T, D_c)", "Overall"] == pytest.approx((0.5 + 3 * 0.8) / 4)
    assert table.loc["triplets", "Overall"] == 4
    assert "Animals" in markdown.read_text()
    assert "Table 1" in latex.read_text()


def generate(config, generator, shard, seeds_file, out, counters_out):
    """The step as the rule runs it, with a shard of two seeds."""
    stage = config["prompt_stage"]
    generate_triplets(
        str(seeds_file),
        str(REPO / stage["generate_template"]),
        dataclasses.asdict(model_spec(config, generator)),
        2,
        stage["batch_size"],
        config["seed"],
        "objects",
        generator,
        shard,
        str(out),
        str(counters_out),
    )


@pytest.mark.slow
def test_a_shard_where_everything_failed_is_an_error_and_writes_nothing(built_config, seeds_file, tmp_path):
    out, counters_out = tmp_path / "raw.parquet", tmp_path / "raw.counters.json"
    # The random-weight model never names the subjects, so every row fails validation.
    with pytest.raises(ShardFailedError, match="all 2 rows failed"):
        generate(built_config, "tiny-qwen2", "00001", seeds_file, out, counters_out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seeds.parquet"]


@pytest.mark.slow
def test_generate_triplets_writes_its_shard_of_the_seeds_and_counters(built_config, seeds_file, tmp_path):
    out, counters_out = tmp_path / "raw.parquet", tmp_path / "raw.counters.json"
    generate(built_config, "smollm2-135m", "00001", seeds_file, out, counters_out)
    frame = read_table(out, schemas.RAW_TRIPLETS)
    assert list(frame["seed_id"]) == list(read_table(seeds_file, schemas.SEEDS)["seed_id"][2:4])
    assert json.loads(frame["sampling"][0])["seed"] == built_config["seed"] + 1
    counters = json.loads(counters_out.read_text())
    assert counters["rows"] == 2
    assert counters["ok"] + sum(counters["failed"].values()) == 2
    assert "transformers" in counters["provenance"]["packages"]
