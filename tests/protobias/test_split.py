import json
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers.benchmark import DOMAINS, benchmark_pairs
from PIL import Image

from blindspot.protobias import export
from blindspot.protobias.export import export_dataset
from blindspot.protobias.split import (
    assign_splits,
    filter_validation_subset,
    image_decisions,
    preference_subset,
    split_of,
)


def test_split_is_at_the_triplet_level_and_stable():
    pairs = benchmark_pairs()
    split = assign_splits(pairs, seed=1, test_fraction=0.5)
    assert (split.groupby("seed_id")["split"].nunique() == 1).all()  # no seed in both splits, so no triplet
    assert split["seed_id"].nunique() < split["triplet_id"].nunique()  # seeds with several triplets
    assert set(split["split"]) == {"train", "test"}
    # Adding triplets never moves an existing one.
    more = assign_splits(benchmark_pairs(60), seed=1, test_fraction=0.5).set_index("pair_id")["split"]
    assert more.loc[split["pair_id"]].tolist() == split["split"].tolist()
    shares = [split_of(f"x{i}", 3, 0.74) == "test" for i in range(4000)]
    assert np.mean(shares) == pytest.approx(0.74, abs=0.03)


def test_image_decisions_follow_every_vlm():
    images = image_decisions(benchmark_pairs(5), threshold=8).set_index("image_id")
    assert images.loc["c0-flux", "accepted"] == np.False_  # corr scored 3 by both VLMs
    assert images.loc["c1-flux", "accepted"] == np.True_
    assert images.loc["a0-flux", "accepted"] == np.False_  # adv: 2 by qwen, 9 by intern
    assert images.loc["a0-flux", "mean_vlm_score"] == pytest.approx(5.5)


def test_annotation_subsets_are_balanced_and_disjoint():
    pairs = benchmark_pairs(120)
    images = image_decisions(pairs, threshold=8)
    validation, counts = filter_validation_subset(images, 24, seed=5)
    assert counts == {"requested": 24, "selected": 24, "shortfall": {}}
    cells = validation.groupby(["domain", "accepted"]).size()
    assert (cells == 4).all()
    assert len(cells) == 6
    kept = assign_splits(pairs[pairs["kept"]], 1, 0.5)
    test = kept[kept["split"] == "test"]
    preference, counts = preference_subset(test, DOMAINS, 5, set(validation["image_id"]), seed=5)
    assert counts["selected"] == 15
    assert (preference.groupby("domain").size() == 5).all()
    shown = set(preference["left_image_id"]) | set(preference["right_image_id"])
    assert shown.isdisjoint(validation["image_id"])
    assert set(preference["pair_id"]) <= set(test["pair_id"])
    for row in preference.itertuples():
        left, right = (
            (row.corr_image_id, row.adv_image_id) if row.left_role == "corr" else (row.adv_image_id, row.corr_image_id)
        )
        assert (row.left_image_id, row.right_image_id) == (left, right)
    assert set(preference["left_role"]) == {"corr", "adv"}  # the order really is randomised


def test_a_short_cell_is_counted_not_padded():
    images = image_decisions(benchmark_pairs(6), threshold=8)
    validation, counts = filter_validation_subset(images, 60, seed=1)
    assert counts["selected"] == len(validation) < 60
    assert counts["shortfall"]
    _, pref_counts = preference_subset(benchmark_pairs(3).iloc[:0], DOMAINS, 3, set(), seed=1)
    assert pref_counts["shortfall"] == {"animals": 3, "demography": 3, "objects": 3}


def test_the_export_loads_with_datasets_as_pil_images_and_prompt_fields(tmp_path):
    import datasets

    pairs = benchmark_pairs(6, models=("flux",))
    for column in ("corr_path", "adv_path"):
        paths = []
        for i, image_id in enumerate(pairs[column.replace("path", "image_id")]):
            path = tmp_path / f"{image_id}.png"
            Image.fromarray(np.full((8, 8, 3), 20 * i, dtype=np.uint8)).save(path)
            paths.append(str(path))
        pairs[column] = paths
    pairs = pairs.assign(
        subcategory="birds",
        neutral_prompt=[f"a bird {i}" for i in range(6)],
        correct_description="a penguin",
        adversarial_description="a robin",
        correct_instance="penguin",
        adversarial_instance="robin",
        aux_element="stone",
        knob="count",
        correct_value="one",
        adversarial_value="two",
        seed=7,
        generator="g",
        added_entries="",
    )
    benchmark = assign_splits(pairs, 1, 0.5)
    benchmark.loc[benchmark["domain"] == "objects", "split"] = "train"  # a domain with no test pairs
    about = {"name": "Test", "run_name": "r", "threshold": 8, "models": [("text-to-image", "flux-id", "apache-2.0")]}
    export_dataset(benchmark, tmp_path / "dataset", about)
    card = (tmp_path / "dataset" / "README.md").read_text()
    assert card.startswith("---\n")
    assert "config_name: animals" in card
    assert "| text-to-image | flux-id | apache-2.0 |" in card
    loaded = datasets.load_dataset(str(tmp_path / "dataset"), "animals", cache_dir=str(tmp_path / "cache"))
    expected = benchmark[benchmark["domain"] == "animals"]
    assert {split: len(loaded[split]) for split in loaded} == expected["split"].value_counts().to_dict()
    row = loaded[next(iter(loaded))][0]
    assert isinstance(row["image_corr"], Image.Image)
    assert row["image_corr"].size == (8, 8)
    assert row["neutral_prompt"].startswith("a bird")
    assert json.loads(row["vlm_scores"])["qwen"]
    objects = datasets.load_dataset(str(tmp_path / "dataset"), "objects", cache_dir=str(tmp_path / "cache"))
    assert list(objects) == ["train"]  # its test split is empty here, so it is not declared


ABOUT = {"name": "T", "run_name": "r", "threshold": 8, "models": []}


def noise_benchmark(folder: Path, n_pairs: int, side: int) -> pd.DataFrame:
    """`n_pairs` pairs of one domain whose images are `side`-pixel noise PNGs, which PNG cannot compress, so
    their bytes, not the table's text, are what an export has to hold; every third pair is in train."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    pairs = benchmark_pairs(n_pairs, models=("flux",)).assign(domain="animals")
    pairs["split"] = ["train" if i % 3 == 0 else "test" for i in range(n_pairs)]
    for column in ("corr_path", "adv_path"):
        pairs[column] = [str(folder / f"{column}{i}.png") for i in range(n_pairs)]
        for path in pairs[column]:
            Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(path)
    return pairs.assign(
        subcategory="birds",
        neutral_prompt=[f"a bird {i}" for i in range(n_pairs)],
        correct_description="d_c",
        adversarial_description="d_a",
        correct_instance="penguin",
        adversarial_instance="robin",
        aux_element="stone",
        knob="count",
        correct_value="one",
        adversarial_value="two",
        seed=range(n_pairs),
        generator="g",
        added_entries="",
    )


def test_the_export_writes_each_split_in_batches_of_rows_with_every_field_and_image_in_pair_order(
    tmp_path, monkeypatch
):
    import datasets

    monkeypatch.setattr(export, "BATCH_ROWS", 3)
    benchmark = noise_benchmark(tmp_path / "images", 20, 8)
    export_dataset(benchmark, tmp_path / "dataset", ABOUT)
    # Only the files `datasets` reads: the Arrow files the export streams through are gone.
    assert sorted(str(p.relative_to(tmp_path / "dataset")) for p in (tmp_path / "dataset").rglob("*")) == [
        "README.md",
        "data",
        "data/animals",
        "data/animals/test-00000-of-00001.parquet",
        "data/animals/train-00000-of-00001.parquet",
    ]
    for split, sizes in (("test", [3, 3, 3, 3, 1]), ("train", [3, 3, 1])):
        metadata = pq.ParquetFile(
            tmp_path / "dataset" / "data" / "animals" / f"{split}-00000-of-00001.parquet"
        ).metadata
        assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == sizes

    loaded = datasets.load_dataset(str(tmp_path / "dataset"), "animals", cache_dir=str(tmp_path / "cache"))
    assert loaded["test"].features == datasets.Features(
        {name: datasets.Value("int64" if name == "seed" else "string") for name in export.FIELDS}
        | {"image_corr": datasets.Image(), "image_adv": datasets.Image()}
    )
    for split in ("test", "train"):
        rows = loaded[split].cast_column("image_corr", datasets.Image(decode=False))
        rows = rows.cast_column("image_adv", datasets.Image(decode=False))
        expected = benchmark[benchmark["split"] == split].sort_values("pair_id")
        assert [{name: row[name] for name in export.FIELDS} for row in rows] == expected[list(export.FIELDS)].to_dict(
            "records"
        )
        for row, corr, adv in zip(rows, expected["corr_path"], expected["adv_path"], strict=True):
            assert row["image_corr"] == {"bytes": Path(corr).read_bytes(), "path": Path(corr).name}
            assert row["image_adv"] == {"bytes": Path(adv).read_bytes(), "path": Path(adv).name}


def test_the_exports_memory_does_not_grow_with_the_split(tmp_path, monkeypatch):
    """A paper-scale test split is tens of GB of PNGs against a job of 12 GB: the export may hold a batch of
    rows' images, never the split's."""
    monkeypatch.setattr(export, "BATCH_ROWS", 2)

    def peak(n_pairs: int) -> int:
        benchmark = noise_benchmark(tmp_path / f"images{n_pairs}", n_pairs, 128)
        tracemalloc.start()
        try:
            export_dataset(benchmark, tmp_path / f"dataset{n_pairs}", ABOUT)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(3)  # the first export's one-time allocations (modules `datasets` imports lazily) are not the split's
    small, large = peak(3), peak(60)
    image = (tmp_path / "images60" / "corr_path0.png").stat().st_size
    # Holding the split would add about 2 * 57 images; a batch is 2 * BATCH_ROWS of them.
    assert large - small < 2 * export.BATCH_ROWS * image
