import copy

import pytest
import yaml
from conftest import REPO

from blindspot.config import SCHEMA_DIR, ConfigError, check_schema
from blindspot.protobias.taxonomy import draft, enumerate_seeds, load_taxonomy, sample_seeds

DOMAINS = ("animals", "demography", "objects")


def taxonomy_of(domain):
    return load_taxonomy(REPO / "config" / "taxonomy" / f"{domain}.yaml", domain)


@pytest.mark.parametrize("domain", DOMAINS)
def test_enumeration_is_the_full_product(domain):
    taxonomy = taxonomy_of(domain)
    pairs = sum(len(e["atypical"]) * len(e["typical"]) for e in taxonomy["subcategories"].values())
    pairs *= max(1, len(taxonomy["qualifiers"]))
    knob_changes = sum(len(k["values"]) * (len(k["values"]) - 1) for k in taxonomy["knobs"].values())
    expected = pairs * len(taxonomy["scenes"]) * len(taxonomy["auxiliary_elements"]) * knob_changes
    seeds = enumerate_seeds(taxonomy)
    assert len(seeds) == expected
    assert len({tuple(s.values()) for s in seeds}) == expected  # no duplicates


def test_appendix_a_taxonomy_is_there():
    animals, objects, demography = (taxonomy_of(d) for d in ("animals", "objects", "demography"))
    assert set(animals["subcategories"]) == {"birds", "mammals", "other_animals"}
    assert "penguin" in animals["subcategories"]["birds"]["atypical"]
    assert set(objects["subcategories"]) == {"furniture", "vehicles", "tableware"}
    assert {"tuk-tuk", "golf cart"} <= set(objects["subcategories"]["vehicles"]["atypical"])
    assert set(demography["subcategories"]) == {"religion", "nationality", "sexual_orientation"}
    attributes = {(q["attribute"], q["polarity"]) for q in demography["qualifiers"]}
    assert attributes == {(a, p) for a in ("wealth", "intellect", "morality", "power", "civility")
                          for p in ("positive", "negative")}  # fmt: skip
    for taxonomy in (animals, objects, demography):
        assert set(taxonomy["knobs"]) == {"count", "colour_tone", "layout_relation", "spatial_placement", "scale"}


def test_correct_image_shows_the_atypical_member_and_negative_attributes_invert_it():
    seeds = enumerate_seeds(taxonomy_of("demography"))
    religion = [s for s in seeds if s["subcategory"] == "religion"]
    positive = {(s["correct_instance"], s["adversarial_instance"]) for s in religion if s["qualifier"] == "wealthy"}
    negative = {(s["correct_instance"], s["adversarial_instance"]) for s in religion if s["qualifier"] == "poor"}
    assert positive == {("Muslim person", "Christian person"), ("Jewish person", "Christian person")}
    assert negative == {("Christian person", "Muslim person"), ("Christian person", "Jewish person")}
    animals = enumerate_seeds(taxonomy_of("animals"))
    assert all(s["correct_instance"] != s["adversarial_instance"] for s in animals)
    assert {s["adversarial_instance"] for s in animals if s["subcategory"] == "birds"} == {"robin", "sparrow"}


def test_drafts_put_each_value_where_it_belongs():
    assert draft("a {subject} near a pond with {aux}", "a {aux} {value} the {subject}", "bird", "stone", "behind") == (
        "a bird near a pond with a stone behind the bird"
    )
    seed = enumerate_seeds(taxonomy_of("animals"))[0]
    assert seed["label"] in seed["draft_neutral"]
    assert seed["correct_value"] in seed["draft_neutral"]
    assert seed["correct_instance"] in seed["draft_correct"]
    assert seed["correct_value"] in seed["draft_correct"]
    assert seed["adversarial_instance"] in seed["draft_adversarial"]
    assert seed["adversarial_value"] in seed["draft_adversarial"]


def test_sampling_is_deterministic_and_sorted():
    path = REPO / "config" / "taxonomy" / "objects.yaml"
    first, again, other = (sample_seeds(path, "objects", 50, s) for s in (1, 1, 2))
    assert first.equals(again)
    assert not first["seed_id"].equals(other["seed_id"])
    assert first["seed_id"].is_unique
    assert first["seed_id"].is_monotonic_increasing
    assert (first["domain"] == "objects").all()


def test_asking_for_more_seeds_than_exist_names_the_key():
    with pytest.raises(ConfigError, match=r"'domains\.animals\.n_seeds'"):
        sample_seeds(REPO / "config" / "taxonomy" / "animals.yaml", "animals", 10**9, 1)


def test_a_bad_taxonomy_names_the_key(tmp_path):
    taxonomy = yaml.safe_load((REPO / "config" / "taxonomy" / "animals.yaml").read_text())
    broken = copy.deepcopy(taxonomy)
    del broken["knobs"]["count"]["phrase"]
    with pytest.raises(ConfigError, match=r"'knobs\.count\.phrase'"):
        check_schema(broken, SCHEMA_DIR / "taxonomy.schema.yaml", "taxonomy")
    path = tmp_path / "animals.yaml"
    path.write_text(yaml.safe_dump(taxonomy))
    with pytest.raises(ConfigError, match="config names it 'birds'"):
        load_taxonomy(path, "birds")


def test_a_new_domain_is_only_data(tmp_path):
    taxonomy = {
        "domain": "plants",
        "description": "trees",
        "subcategories": {"trees": {"label": "tree", "atypical": ["baobab"], "typical": ["oak"]}},
        "qualifiers": [],
        "scenes": ["a {subject} on a hill with {aux}"],
        "auxiliary_elements": ["bench"],
        "knobs": {"count": {"values": ["exactly one", "exactly two"], "phrase": "{value} {aux}"}},
    }
    path = tmp_path / "plants.yaml"
    path.write_text(yaml.safe_dump(taxonomy))
    seeds = sample_seeds(path, "plants", 2, 0)
    assert set(seeds["draft_adversarial"]) == {
        "a oak on a hill with exactly two bench",
        "a oak on a hill with exactly one bench",
    }
