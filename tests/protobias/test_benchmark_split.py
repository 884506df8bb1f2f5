"""The benchmark's split and annotation subsets drawn from every domain's pairs (`split.split_benchmark`), the
rows a seed shard's jobs take, and the dataset card's models."""

import dataclasses
import json

import pandas as pd
import pytest

from blindspot.models.spec import model_spec
from blindspot.protobias.export import model_rows
from blindspot.protobias.iqa import pairs_to_measure
from blindspot.protobias.render import triplets_of_seeds
from blindspot.protobias.split import split_benchmark, with_descriptions

DOMAINS = ["animals", "objects"]


def triplets(n=40):
    return pd.DataFrame(
        {
            "triplet_id": [f"t{i}" for i in range(n)],
            "seed_id": [f"s{i // 2}" for i in range(n)],  # two generators' triplets per seed
            "domain": [DOMAINS[i % 2] for i in range(n)],
            "neutral_prompt": [f"a bird {i}" for i in range(n)],
            "correct_description": [f"a penguin {i}" for i in range(n)],
            "adversarial_description": [f"a robin {i}" for i in range(n)],
        }
    )


VLMS = ("qwen", "intern")


def pairs(n=40, models=("flux", "sana")):
    """One pair per triplet and model; a pair is kept when both images score 8 or more."""
    rows = []
    for i in range(n):
        for t2i in models:
            corr, adv = (9 if i % 4 else 3), (8 if i % 5 else 2)
            rows.append(
                {
                    "pair_id": f"p{i}-{t2i}",
                    "triplet_id": f"t{i}",
                    "t2i": t2i,
                    "seed": 1,
                    "corr_image_id": f"c{i}-{t2i}",
                    "corr_path": f"/c{i}{t2i}.png",
                    "adv_image_id": f"a{i}-{t2i}",
                    "adv_path": f"/a{i}{t2i}.png",
                    "vlm_scores": json.dumps({"qwen": {"corr": corr, "adv": adv}, "intern": {"corr": corr, "adv": 9}}),
                    "min_corr_score": float(corr),
                    "min_adv_score": float(adv),
                    "kept": corr >= 8 and adv >= 8,
                }
            )
    return pd.DataFrame(rows)


def benchmark(seed=6, threshold=8, **settings):
    settings = {"test_fraction": 0.5, "filter_validation_images": 8, "preference_pairs_per_domain": 3} | settings
    return split_benchmark(pairs(), triplets(), DOMAINS, VLMS, threshold=threshold, seed=seed, **settings)


def test_the_benchmark_is_the_kept_pairs_with_their_triplets_fields_split_by_triplet():
    kept = benchmark().pairs
    assert set(kept["pair_id"]) == set(pairs().query("kept")["pair_id"])
    assert (kept.groupby("triplet_id")["split"].nunique() == 1).all()  # no triplet in both splits
    assert set(kept["split"]) == {"train", "test"}
    row = kept.set_index("pair_id").loc["p1-flux"]
    assert (row["domain"], row["neutral_prompt"]) == ("objects", "a bird 1")


def test_the_counters_count_the_kept_pairs_per_domain_and_split():
    found = benchmark()
    counters = found.counters
    assert counters["pairs_kept"] == len(found.pairs)
    per_cell = found.pairs.groupby(["domain", "split"]).size()
    assert counters["per_domain_and_split"] == {f"{d}/{s}": n for (d, s), n in per_cell.items()}
    assert counters["filter_validation"]["requested"] == 8
    assert counters["preference"] == {"per_domain": 3, "selected": 6, "shortfall": {}}


def test_the_annotation_subsets_share_no_image_and_preference_pairs_are_test_pairs():
    found = benchmark()
    validation, preference = found.filter_validation, found.preference
    # Validation images come from every pair, the rejected ones too: people check both decisions.
    assert set(validation["accepted"]) == {True, False}
    assert (validation.groupby(["domain", "accepted"]).size() == 2).all()
    shown = set(preference["left_image_id"]) | set(preference["right_image_id"])
    assert shown.isdisjoint(validation["image_id"])
    test_pairs = found.pairs.loc[found.pairs["split"] == "test", "pair_id"]
    assert set(preference["pair_id"]) <= set(test_pairs)
    assert (preference.groupby("domain").size() == 3).all()


def test_validation_images_are_shown_with_their_own_description():
    validation = benchmark().filter_validation.set_index("image_id")
    assert validation["description"].notna().all()
    for image_id, row in validation.iterrows():
        number = row["triplet_id"].removeprefix("t")
        expected = f"a penguin {number}" if image_id.startswith("c") else f"a robin {number}"
        assert row["description"] == expected


def test_with_descriptions_leaves_an_image_without_a_pair_undescribed():
    images = pd.DataFrame({"image_id": ["c0-flux", "a0-flux", "elsewhere"]})
    described = with_descriptions(images, pairs(1, ("flux",)).merge(triplets(1), on="triplet_id"))
    assert described["description"].tolist()[:2] == ["a penguin 0", "a robin 0"]
    assert pd.isna(described["description"].iloc[2])


def test_the_threshold_decides_which_validation_images_count_as_accepted():
    assert set(benchmark(threshold=8).filter_validation["accepted"]) == {True, False}
    strict = benchmark(threshold=10)
    assert not strict.filter_validation["accepted"].any()
    assert strict.counters["filter_validation"]["shortfall"] == {"animals/accept": 2, "objects/accept": 2}
    assert strict.pairs.equals(benchmark(threshold=8).pairs)  # the pairs kept were decided before


def test_the_seed_decides_the_draws_and_the_same_seed_draws_the_same():
    first, again, other = benchmark(seed=5), benchmark(seed=5), benchmark(seed=6)
    assert first.pairs.equals(again.pairs)
    assert first.preference.equals(again.preference)
    assert not first.pairs["split"].equals(other.pairs["split"])


def test_a_shard_takes_every_generators_triplets_of_its_seeds_and_no_other():
    shard = triplets_of_seeds(triplets(), pd.Series(["s1", "s3"]))
    assert shard["triplet_id"].tolist() == ["t2", "t3", "t6", "t7"]


def test_a_shard_measures_the_kept_pairs_of_its_triplets_only():
    measured = pairs_to_measure(pairs(), triplets(), pd.Series(["s0", "s1", "s2"]))
    # t0..t5; t0 and t4 fail the VLMs (corr 3, adv 2), t5 too (adv 2)
    assert sorted(set(measured["triplet_id"])) == ["t1", "t2", "t3"]
    assert len(measured) == 6  # both models' pairs


def test_the_card_lists_each_roles_models_in_order_with_their_licences(tiny_config):
    sana = model_spec(tiny_config, "tiny-sana")
    hub = dataclasses.replace(sana, name="sana", path="Efficient-Large-Model/Sana", built=False, licence=None)
    licensed = dataclasses.replace(hub, name="flux", path="black-forest-labs/FLUX.1-dev", licence="flux-1-dev")
    rows = model_rows({"text-to-image": [licensed, sana], "image filter": [hub]})
    assert rows == [
        ("text-to-image", "black-forest-labs/FLUX.1-dev", "flux-1-dev"),
        ("text-to-image", "built:tiny-sana", sana.licence or "see model card"),
        ("image filter", "Efficient-Large-Model/Sana", "see model card"),
    ]


@pytest.mark.parametrize("fraction", [0.0, 1.0])
def test_an_all_train_or_all_test_split_still_draws_what_it_can(fraction):
    found = benchmark(test_fraction=fraction)
    assert set(found.pairs["split"]) == {"test" if fraction else "train"}
    assert found.counters["preference"]["selected"] == (6 if fraction else 0)
