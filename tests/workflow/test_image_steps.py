"""The image and benchmark steps run as their rules run them, from files and the values their rules pass:
consensus -> split -> export, and a shard's image quality -> Table 2 with real NIQE parameters.

The VLM scores are written here: random-weight VLMs cannot judge, and the consensus rule needs scores
that pass and fail (tests/protobias/test_consensus.py tests the rule itself)."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.workflow import REPO, spec_of
from PIL import Image

from blindspot import schemas
from blindspot.io import read_table, write_table
from blindspot.models.spec import model_spec, resolved_recipe
from blindspot.steps import benchmark, images

DOMAIN = "animals"
VLMS = ["qwen", "intern"]


def write_domain(tmp_path: Path, n_triplets: int = 6) -> dict[str, Path]:
    """One domain's seeds, accepted triplets, one model's renders (128-pixel PNGs) and two VLMs' scores.
    Triplet i comes from seed i; both VLMs score every image 9, but the adv image of triplet 0 gets 2
    from qwen."""
    rng = np.random.default_rng(0)
    seeds = pd.DataFrame({name: [f"{name}{i}" for i in range(n_triplets)] for name in schemas.SEEDS.names})
    seeds = seeds.assign(sample_seed=0)
    triplets = pd.DataFrame({name: [f"{name}{i}" for i in range(n_triplets)] for name in schemas.TRIPLETS.names})
    triplets = triplets.assign(domain=DOMAIN, seed_id=seeds["seed_id"])
    renders, scores = [], []
    for i, triplet in enumerate(triplets.itertuples()):
        for role, description in (("corr", triplet.correct_description), ("adv", triplet.adversarial_description)):
            image_id = f"{role}{i}"
            path = tmp_path / "images" / f"{image_id}.png"
            path.parent.mkdir(exist_ok=True)
            Image.fromarray((255 * rng.random((128, 128, 3))).astype(np.uint8)).save(path)
            renders.append(
                {
                    "image_id": image_id,
                    "triplet_id": triplet.triplet_id,
                    "role": role,
                    "description": description,
                    "t2i": "tiny-sana",
                    "model_id": "built:tiny-sana",
                    "model_revision": "",
                    "seed": i,
                    "steps": 2,
                    "guidance": 4.5,
                    "height": 128,
                    "width": 128,
                    "settings": "{}",
                    "path": str(path),
                    "sha256": "",
                }
            )
            for vlm in VLMS:
                score = 2 if (i, role, vlm) == (0, "adv", "qwen") else 9
                scores.append(
                    {
                        "image_id": image_id,
                        "triplet_id": triplet.triplet_id,
                        "role": role,
                        "t2i": "tiny-sana",
                        "vlm": vlm,
                        "model_id": vlm,
                        "model_revision": "",
                        "template_version": "v1",
                        "expected_score": score - 0.5,
                        "argmax_score": score,
                        "valid_mass": 1.0,
                        "probabilities": [0.1] * 10,
                        "text": str(score),
                        "text_score": score,
                    }
                )
    files = {name: tmp_path / f"{name}.parquet" for name in ("seeds", "triplets", "renders", "scores")}
    write_table(files["seeds"], seeds, schemas.SEEDS)
    write_table(files["triplets"], triplets, schemas.TRIPLETS)
    write_table(files["renders"], pd.DataFrame(renders), schemas.RENDERS)
    write_table(files["scores"], pd.DataFrame(scores), schemas.VLM_SCORES)
    return files


def keep_pairs(tmp_path: Path, files: dict[str, Path], threshold: float) -> Path:
    images.keep_consensus_pairs(
        domain=DOMAIN,
        renders=[str(files["renders"])],
        scores=[str(files["scores"])],
        out=str(tmp_path / "pairs.parquet"),
        counters_out=str(tmp_path / "pairs.json"),
        vlms=VLMS,
        threshold=threshold,
        score="argmax",
    )
    return tmp_path / "pairs.parquet"


def test_consensus_split_and_export_steps_run_from_what_their_rules_pass(tmp_path, tiny_config):
    import datasets

    files = write_domain(tmp_path)
    pairs = read_table(keep_pairs(tmp_path, files, threshold=8), schemas.PAIRS)
    assert pairs.set_index("triplet_id")["kept"].to_dict() == {f"triplet_id{i}": i != 0 for i in range(6)}
    counters = json.loads((tmp_path / "pairs.json").read_text())
    assert counters["rejections_per_vlm"] == {"qwen": 1, "intern": 0}
    assert "packages" in counters["provenance"]

    outputs = {name: str(tmp_path / f"{name}.out") for name in ("out", "filter_validation", "preference_pairs")}
    benchmark.split_benchmark(
        pairs=[str(tmp_path / "pairs.parquet")],
        triplets=[str(files["triplets"])],
        **outputs,
        counters_out=str(tmp_path / "split.json"),
        domains=[DOMAIN],
        vlms=["qwen", "intern"],
        test_fraction=0.5,
        threshold=8,
        filter_validation_images=2,
        preference_pairs_per_domain=1,
        seed=7,
    )
    kept = read_table(outputs["out"], schemas.BENCHMARK_PAIRS)
    assert sorted(kept["triplet_id"]) == [f"triplet_id{i}" for i in range(1, 6)]
    validation = read_table(outputs["filter_validation"], schemas.ANNOTATION_IMAGES)
    assert sorted(validation["accepted"]) == [False, True]  # one of each: qwen rejected adv0
    preference = read_table(outputs["preference_pairs"], schemas.ANNOTATION_PAIRS)
    assert len(preference) == json.loads((tmp_path / "split.json").read_text())["preference"]["selected"]

    models = {"text-to-image": [dataclasses.asdict(model_spec(tiny_config, "tiny-sana"))]}
    dataset, card = tmp_path / "dataset", tmp_path / "card.md"
    benchmark.export_dataset(
        benchmark=outputs["out"],
        out=str(dataset),
        card=str(card),
        name="Test bench",
        run_name="a-run",
        threshold=8,
        models=models,
    )
    assert card.read_text() == (dataset / "README.md").read_text()
    assert "| text-to-image | built:tiny-sana |" in card.read_text()
    assert "Run `a-run`" in card.read_text()
    loaded = datasets.load_dataset(str(dataset), DOMAIN, cache_dir=str(tmp_path / "cache"))
    assert sum(len(loaded[split]) for split in loaded) == 5


@pytest.fixture(scope="module")
def niqe(tmp_path_factory) -> dict:
    """NIQE as its rule passes it: the spec of the model built from BasicSR's real parameters."""
    from blindspot.tiny.build import build_model

    config = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    config["resources_dir"] = str(tmp_path_factory.mktemp("resources"))
    spec = model_spec(config, "niqe")
    recipe = resolved_recipe(config, "niqe")
    build_model(Path(spec.path), recipe | {"archive": str(REPO / recipe["archive"])}, config["seed"])
    return dataclasses.asdict(spec)


def test_a_shard_measures_its_kept_pairs_with_each_metric_and_table2_sums_them(tmp_path, niqe):
    files = write_domain(tmp_path)
    pairs = keep_pairs(tmp_path, files, threshold=8)
    again = niqe | {"name": "niqe-again"}
    for shard in ("00000", "00001"):
        images.measure_image_quality(
            shard=shard,
            pairs=str(pairs),
            triplets=str(files["triplets"]),
            seeds=str(files["seeds"]),
            out=str(tmp_path / f"quality{shard}.parquet"),
            models=[niqe, again],
            batch_size=2,
            shard_size=4,
            journals=str(tmp_path / f"quality{shard}.journals"),
        )
        assert not (tmp_path / f"quality{shard}.journals").exists()  # the job removes its journals
    first = read_table(tmp_path / "quality00000.parquet", schemas.IMAGE_QUALITY)
    # Shard 0 holds seeds 0-3; triplet 0's pair was not kept: three pairs, each by both metrics, in order.
    assert first["metric"].tolist() == ["niqe"] * 3 + ["niqe-again"] * 3
    assert np.isfinite(first[["corr_score", "adv_score"]].to_numpy()).all()
    assert np.array_equal(first["corr_score"].iloc[:3], first["corr_score"].iloc[3:])  # the same metric twice
    assert not first["higher_is_better"].any()  # lower NIQE is better
    second = read_table(tmp_path / "quality00001.parquet", schemas.IMAGE_QUALITY)
    assert len(second) == 2 * 2  # seeds 4 and 5
    assert set(first["pair_id"]).isdisjoint(second["pair_id"])

    table = {ext: tmp_path / f"table2.{ext}" for ext in ("csv", "md", "tex")}
    images.make_table2(
        quality=[str(tmp_path / f"quality{shard}.parquet") for shard in ("00000", "00001")],
        csv=str(table["csv"]),
        markdown=str(table["md"]),
        latex=str(table["tex"]),
    )
    rows = pd.read_csv(table["csv"]).set_index("Metric")
    assert rows.loc["niqe (lower is better)", "Pairs"] == 5
    assert rows.loc["niqe-again (lower is better)", "Pairs"] == 5
    assert table["md"].read_text().startswith("Table 2: no-reference image quality")


def test_a_later_filter_vlm_loads_nothing_where_the_earlier_rejected_every_pair(tiny_config, tmp_path, monkeypatch):
    """In order, the second VLM scores only what the first passed: a shard the first rejected whole gets an empty
    score table and counters that say so, and the second VLM is never loaded."""
    from blindspot.models import vlm_scoring

    files = write_domain(tmp_path, n_triplets=2)
    first = read_table(files["scores"], schemas.VLM_SCORES).query("vlm == 'qwen'").assign(argmax_score=2.0)
    write_table(tmp_path / "first.parquet", first, schemas.VLM_SCORES)

    def never(*args, **kwargs):
        raise AssertionError("the VLM was loaded for a shard with nothing left to score")

    monkeypatch.setattr(vlm_scoring, "load_vlm_scorer", never)
    out, counters = tmp_path / "second.parquet", tmp_path / "second.json"
    images.judge_images(
        domain=DOMAIN,
        t2i="tiny-sana",
        vlm="intern",
        shard="00000",
        renders=str(files["renders"]),
        earlier=[str(tmp_path / "first.parquet")],
        template="unused.yaml",
        out=str(out),
        counters_out=str(counters),
        model=spec_of(tiny_config, "tiny-internvl3"),
        earlier_vlms=["qwen"],
        threshold=8,
        score="argmax",
        validation_pool=0.0,
        seed=0,
        batch_size=2,
        journal=str(tmp_path / "journal.jsonl"),
    )
    assert read_table(out, schemas.VLM_SCORES).empty
    said = json.loads(counters.read_text())
    assert (said["images"], said["images_in_shard"], said["left_to_earlier_vlms"]) == (0, 4, 4)
