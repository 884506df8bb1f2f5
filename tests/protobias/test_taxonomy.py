import copy
import functools

import pandas as pd
import pytest
import yaml
from helpers.workflow import REPO

from blindspot.checks import validate_config
from blindspot.config import ConfigError, check_schema
from blindspot.paths import SCHEMA_DIR
from blindspot.prompts import PromptTemplate
from blindspot.protobias import taxonomy as taxonomy_module
from blindspot.protobias.export import dataset_card, source_counts
from blindspot.protobias.taxonomy import (
    balanced_quotas,
    count_seeds,
    draft,
    enumerate_seeds,
    load_taxonomy,
    sample_seeds,
)

DOMAINS = ("animals", "demography", "objects")


def taxonomy_path(domain):
    return REPO / "config" / "taxonomy" / f"{domain}.yaml"


def taxonomy_of(domain):
    return load_taxonomy(taxonomy_path(domain), domain)


@functools.cache
def seeds_of(domain):
    """Every seed of a shipped domain, enumerated once for the module (tests only read it)."""
    return tuple(enumerate_seeds(taxonomy_of(domain)))


def fitting(raw, subcategory, member, kind):
    """What fits a member, read straight from the YAML: its own list, else its subcategory's, else the domain's."""
    entry = raw["subcategories"][subcategory]
    own = (entry["atypical"] | entry["typical"])[member]
    return set(own.get(kind) or entry.get(kind) or raw[kind])


def assert_every_pairing_fits(seeds, raw):
    templates = {scene["template"]: name for name, scene in raw["scenes"].items()}
    for seed in seeds:
        for member in (seed["correct_instance"], seed["adversarial_instance"]):
            scenes = fitting(raw, seed["subcategory"], member, "scenes")
            assert templates[seed["scene"]] in scenes, f"{member} does not fit '{seed['scene']}': {seed['seed_id']}"
            aux = fitting(raw, seed["subcategory"], member, "auxiliary_elements")
            assert seed["aux_element"] in aux, f"{member} does not fit a {seed['aux_element']}: {seed['seed_id']}"


@pytest.mark.parametrize("config_name", ["config.yaml", "tiny.yaml"])
def test_every_seed_of_the_config_pairs_only_what_fits(config_name):
    config = yaml.safe_load((REPO / "config" / config_name).read_text())
    for domain, entry in config["domains"].items():
        raw = yaml.safe_load((REPO / entry["taxonomy"]).read_text())
        seeds = sample_seeds(REPO / entry["taxonomy"], domain, entry["n_seeds"], config["seed"])
        assert len(seeds) == entry["n_seeds"]
        assert_every_pairing_fits(seeds.to_dict("records"), raw)


def test_the_issues_misfits_are_never_drawn():
    seeds = pd.DataFrame([*seeds_of("animals"), *seeds_of("objects")])
    assert not seeds.empty
    instance = seeds["correct_instance"]
    assert not ((instance == "jellyfish") & seeds["scene"].str.contains("meadow")).any()
    assert not ((instance == "golf cart") & seeds["scene"].str.contains("tabletop")).any()
    vehicles = seeds[seeds["subcategory"] == "vehicles"]
    assert set(vehicles["aux_element"]) <= {"traffic cone", "street lamp", "bollard", "cardboard box"}
    assert not seeds[seeds["subcategory"] == "tableware"]["scene"].str.contains("parking lot|street").any()
    # The most specific fit wins, and a pair gets what fits both members.
    jellyfish = seeds[instance == "jellyfish"]
    assert set(jellyfish["aux_element"]) == {"stone", "branch", "log"}
    assert set(jellyfish[jellyfish["adversarial_instance"] == "cat"]["scene"]) == {
        "a {subject} on a sandy beach with {aux}"
    }
    # A dolphin shares no scene with a cat, so that pair is not drawn; with a dog or a horse it is.
    assert set(seeds[instance == "dolphin"]["adversarial_instance"]) == {"dog", "horse"}


@pytest.mark.parametrize("domain", DOMAINS)
def test_enumeration_is_every_fitting_combination_once(domain):
    taxonomy = taxonomy_of(domain)
    raw = yaml.safe_load(taxonomy_path(domain).read_text())
    seeds = enumerate_seeds(taxonomy)
    knob_changes = sum(len(k["values"]) * (len(k["values"]) - 1) for k in taxonomy["knobs"].values())
    expected = 0
    for name, entry in raw["subcategories"].items():
        for atypical in entry["atypical"]:
            for typical in entry["typical"]:
                scenes, aux = (
                    fitting(raw, name, atypical, k) & fitting(raw, name, typical, k)
                    for k in ("scenes", "auxiliary_elements")
                )
                expected += len(scenes) * len(aux)
    expected *= max(1, len(taxonomy["qualifiers"])) * knob_changes
    assert len(seeds) == expected
    assert len({tuple(s.values()) for s in seeds}) == expected  # no duplicates
    assert_every_pairing_fits([s | {"seed_id": ""} for s in seeds], raw)


def test_appendix_a_taxonomy_is_there():
    animals, objects, demography = (taxonomy_of(d) for d in ("animals", "objects", "demography"))
    assert set(animals["subcategories"]) == {"birds", "mammals", "other_animals"}
    assert "penguin" in animals["subcategories"]["birds"]["atypical"]
    assert set(objects["subcategories"]) == {"furniture", "vehicles", "tableware"}
    assert {"tuk-tuk", "golf cart"} <= set(objects["subcategories"]["vehicles"]["atypical"])
    assert set(demography["subcategories"]) == {"religion", "nationality", "sexual_orientation"}
    attributes = {(q["attribute"], q["polarity"]) for q in demography["qualifiers"]}
    assert attributes == {
        (a, p) for a in ("wealth", "intellect", "morality", "power", "civility") for p in ("positive", "negative")
    }
    for taxonomy in (animals, objects, demography):
        assert set(taxonomy["knobs"]) == {"count", "colour_tone", "layout_relation", "spatial_placement", "scale"}


def test_what_the_paper_names_is_marked_paper_and_the_rest_added():
    animals, objects, demography = (taxonomy_of(d) for d in ("animals", "objects", "demography"))
    paper = {name for name, entry in animals["auxiliary_elements"].items() if entry["source"] == "paper"}
    assert paper == {"stone", "branch"}  # section 4.1: "stones or branches for animals"
    assert animals["scenes"]["pond"]["source"] == "paper"  # Figure 1
    assert animals["scenes"]["meadow"]["source"] == "added"
    tableware = objects["subcategories"]["tableware"]
    assert tableware["source"] == "paper"  # A.1 names tableware but none of its members
    assert {entry["source"] for entry in (tableware["atypical"] | tableware["typical"]).values()} == {"added"}
    assert {entry["source"] for entry in demography["scenes"].values()} == {"added"}  # A.1 names none
    for domain in DOMAINS:
        for seed in seeds_of(domain)[::97]:
            assert set(filter(None, seed["added_entries"].split(","))) <= set(seed)
    seeds = pd.DataFrame(seeds_of("animals"))
    paper_only = seeds[seeds["scene"].str.contains("pond|tree stump") & seeds["aux_element"].isin(["stone", "branch"])]
    assert not paper_only.empty
    assert (paper_only["added_entries"] == "").all()
    meadow = seeds[seeds["scene"].str.contains("meadow") & (seeds["aux_element"] == "log")]
    assert (meadow["added_entries"] == "scene,aux_element").all()
    objects_seeds = pd.DataFrame(seeds_of("objects"))
    assert (
        objects_seeds[objects_seeds["subcategory"] == "tableware"]["added_entries"]
        .str.contains("correct_instance,adversarial_instance")
        .all()
    )


def test_an_entry_without_its_source_names_the_key():
    raw = yaml.safe_load(taxonomy_path("animals").read_text())
    del raw["subcategories"]["birds"]["atypical"]["kiwi"]["source"]
    with pytest.raises(ConfigError, match=r"'subcategories\.birds\.atypical\.kiwi\.source'"):
        check_schema(raw, SCHEMA_DIR / "taxonomy.schema.yaml", "taxonomy")


def test_demography_seeds_carry_the_realizations_of_their_own_members():
    seeds = pd.DataFrame(seeds_of("demography"))
    jewish = seeds[(seeds["correct_instance"] == "Jewish person") & (seeds["qualifier"] == "wealthy")]
    assert set(jewish["correct_realization"]) == {"a kippah (clothing); a small Star of David pendant (symbols)"}
    assert set(jewish["adversarial_realization"]) == {"a small cross pendant on a necklace (symbols)"}
    wealthy = "an expensive tailored suit (clothing); a gold wristwatch (symbols)"
    assert set(jewish["qualifier_realization"]) == {wealthy}
    # A negative attribute swaps the roles, and each realization stays with its member.
    poor = seeds[(seeds["adversarial_instance"] == "Jewish person") & (seeds["qualifier"] == "poor")]
    assert set(poor["adversarial_realization"]) == set(jewish["correct_realization"])
    assert set(poor["qualifier_realization"]) == {"worn, faded clothes with patches (clothing)"}
    assert set(seeds[seeds["correct_instance"] == "heterosexual person"]["correct_realization"]) == {""}
    assert (pd.DataFrame(seeds_of("animals"))[["correct_realization", "qualifier_realization"]] == "").all().all()


@pytest.mark.parametrize("config_name", ["config.yaml", "tiny.yaml"])
def test_the_generator_template_asks_for_the_realizations(config_name):
    config = yaml.safe_load((REPO / "config" / config_name).read_text())
    template = PromptTemplate.load(REPO / config["prompt_stage"]["generate_template"])
    demography = seeds_of("demography")
    seed = next(s for s in demography if s["correct_instance"] == "Muslim person" and s["qualifier"] == "polite")
    _, user = template.render(seed=seed)
    for field in ("qualifier_realization", "correct_realization", "adversarial_realization", "draft_correct"):
        assert seed[field] in user["content"]
    _, animal = template.render(seed=seeds_of("animals")[0])
    assert "visual details" in user["content"]
    assert "visual details" not in animal["content"]


def test_the_dataset_card_counts_paper_and_added_pairs():
    seeds = pd.DataFrame(seeds_of("animals")).assign(domain="animals")
    paper_only = seeds["scene"].str.contains("pond|tree stump") & seeds["aux_element"].isin(["stone", "branch"])
    benchmark = pd.concat([seeds[paper_only].head(3), seeds[~paper_only].head(2)]).assign(
        pair_id=[f"p{i}" for i in range(5)], split="test", t2i="flux"
    )
    counts = source_counts(benchmark)
    assert counts.loc["animals", "pairs"] == 5
    assert counts.loc["animals", "paper only"] == 3
    assert counts.filter(like="added ").sum(axis=1)["animals"] >= 2
    card = dataset_card(benchmark, {"name": "T", "run_name": "r", "threshold": 8, "models": []})
    assert "paper only" in card
    assert "| animals  |       5 |            3 |" in card
    front = yaml.safe_load(card.split("---")[1])
    # The hub asks a licence "other" for its name and a link (huggingface/hub-docs, datasetcard.md).
    assert (front["license"], front["license_name"], front["license_link"]) == (
        "other",
        "mixed-model-licences",
        "README.md",
    )


def test_drafts_put_each_value_where_it_belongs():
    assert draft("a {subject} near a pond with {aux}", "a {aux} {value} the {subject}", "bird", "stone", "behind") == (
        "a bird near a pond with a stone behind the bird"
    )
    seed = seeds_of("animals")[0]
    assert seed["label"] in seed["draft_neutral"]
    assert seed["correct_value"] in seed["draft_neutral"]
    assert seed["correct_instance"] in seed["draft_correct"]
    assert seed["correct_value"] in seed["draft_correct"]
    assert seed["adversarial_instance"] in seed["draft_adversarial"]
    assert seed["adversarial_value"] in seed["draft_adversarial"]


def test_correct_image_shows_the_atypical_member_and_negative_attributes_invert_it():
    seeds = seeds_of("demography")
    religion = [s for s in seeds if s["subcategory"] == "religion"]
    positive = {(s["correct_instance"], s["adversarial_instance"]) for s in religion if s["qualifier"] == "wealthy"}
    negative = {(s["correct_instance"], s["adversarial_instance"]) for s in religion if s["qualifier"] == "poor"}
    assert positive == {("Muslim person", "Christian person"), ("Jewish person", "Christian person")}
    assert negative == {("Christian person", "Muslim person"), ("Christian person", "Jewish person")}
    animals = seeds_of("animals")
    assert all(s["correct_instance"] != s["adversarial_instance"] for s in animals)
    assert {s["adversarial_instance"] for s in animals if s["subcategory"] == "birds"} == {"robin", "sparrow"}


def test_sampling_is_deterministic_and_sorted():
    path = taxonomy_path("objects")
    first, again, other = (sample_seeds(path, "objects", 50, s) for s in (1, 1, 2))
    assert first.equals(again)
    assert not first["seed_id"].equals(other["seed_id"])
    assert first["seed_id"].is_unique
    assert first["seed_id"].is_monotonic_increasing
    assert (first["domain"] == "objects").all()


def test_asking_for_more_seeds_than_exist_names_the_key():
    with pytest.raises(ConfigError, match=r"'domains\.animals\.n_seeds'"):
        sample_seeds(taxonomy_path("animals"), "animals", 10**9, 1)


def test_a_bad_taxonomy_names_the_key(tmp_path):
    taxonomy = yaml.safe_load(taxonomy_path("animals").read_text())
    broken = copy.deepcopy(taxonomy)
    del broken["knobs"]["count"]["phrase"]
    with pytest.raises(ConfigError, match=r"'knobs\.count\.phrase'"):
        check_schema(broken, SCHEMA_DIR / "taxonomy.schema.yaml", "taxonomy")
    path = tmp_path / "animals.yaml"
    path.write_text(yaml.safe_dump(taxonomy))
    with pytest.raises(ConfigError, match="config names it 'birds'"):
        load_taxonomy(path, "birds")


def test_a_fit_must_name_the_domains_entries_and_leave_every_member_drawn(tmp_path):
    taxonomy = yaml.safe_load(taxonomy_path("animals").read_text())
    unknown = copy.deepcopy(taxonomy)
    unknown["subcategories"]["birds"]["atypical"]["kiwi"]["scenes"] = ["pond", "glacier"]
    (tmp_path / "unknown.yaml").write_text(yaml.safe_dump(unknown))
    with pytest.raises(ConfigError, match=r"'subcategories\.birds\.atypical\.kiwi\.scenes': glacier not among"):
        load_taxonomy(tmp_path / "unknown.yaml", "animals")
    orphan = copy.deepcopy(taxonomy)
    orphan["subcategories"]["mammals"]["atypical"]["dolphin"]["auxiliary_elements"] = ["pine cone"]
    orphan["subcategories"]["mammals"]["typical"] = {"cat": taxonomy["subcategories"]["mammals"]["typical"]["cat"]}
    (tmp_path / "orphan.yaml").write_text(yaml.safe_dump(orphan))
    with pytest.raises(ConfigError, match=r"'subcategories\.mammals\.atypical\.dolphin': .* never drawn"):
        load_taxonomy(tmp_path / "orphan.yaml", "animals")


def test_a_new_domain_is_only_data(tmp_path):
    taxonomy = {
        "domain": "plants",
        "description": "trees",
        "subcategories": {
            "trees": {
                "label": "tree",
                "source": "added",
                "atypical": {"baobab": {"source": "added", "scenes": ["savanna"]}},
                "typical": {"oak": {"source": "added"}},
            }
        },
        "qualifiers": [],
        "scenes": {
            "hill": {"template": "a {subject} on a hill with {aux}", "source": "added"},
            "savanna": {"template": "a {subject} on a savanna with {aux}", "source": "added"},
        },
        "auxiliary_elements": {"bench": {"source": "added"}},
        "knobs": {"count": {"values": ["exactly one", "exactly two"], "phrase": "{value} {aux}", "source": "paper"}},
    }
    path = tmp_path / "plants.yaml"
    path.write_text(yaml.safe_dump(taxonomy))
    seeds = sample_seeds(path, "plants", 2, 0)
    assert set(seeds["draft_adversarial"]) == {
        "a oak on a savanna with exactly two bench",
        "a oak on a savanna with exactly one bench",
    }
    assert set(seeds["added_entries"]) == {"subcategory,correct_instance,adversarial_instance,scene,aux_element"}


def test_each_knob_gets_an_equal_share_of_the_seeds_as_far_as_its_seeds_allow():
    """Drawn uniformly from all seeds, colour tone (5 values, 20 ordered pairs) would get ten times
    scale's share (2 values): docs/fidelity.md P36."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    entry = config["domains"]["animals"]
    shares = sample_seeds(REPO / entry["taxonomy"], "animals", entry["n_seeds"], config["seed"])["knob"].value_counts()
    assert len(shares) == len(taxonomy_of("animals")["knobs"])
    assert shares.max() - shares.min() <= 1


@pytest.mark.parametrize(
    ("sizes", "total", "quotas"),
    [
        ({"a": 10, "b": 2, "c": 10}, 11, {"a": 4, "b": 2, "c": 5}),  # b gives all it has, a and c share the rest
        ({"a": 10, "b": 2, "c": 10}, 22, {"a": 10, "b": 2, "c": 10}),
        ({"a": 3, "b": 3}, 5, {"a": 2, "b": 3}),
        ({"a": 5}, 0, {"a": 0}),
    ],
)
def test_balanced_quotas_fill_the_smallest_strata_first(sizes, total, quotas):
    assert balanced_quotas(sizes, total) == quotas


@pytest.mark.parametrize("domain", DOMAINS)
def test_counting_the_seeds_agrees_with_enumerating_them(domain):
    assert count_seeds(taxonomy_of(domain)) == len(seeds_of(domain))


def test_the_config_check_counts_each_domains_seeds_without_enumerating_them(paper_config, monkeypatch):
    """Enumerating the paper's three taxonomies takes about a second; counting them, a few milliseconds."""

    def enumerate_seeds(taxonomy):
        raise AssertionError("the config check enumerated seeds")

    monkeypatch.setattr(taxonomy_module, "enumerate_seeds", enumerate_seeds)
    validate_config(paper_config)


def test_the_config_check_refuses_more_seeds_than_a_taxonomy_has(tiny_config):
    available = len(seeds_of("animals"))
    tiny_config["domains"]["animals"]["n_seeds"] = available
    validate_config(tiny_config)
    tiny_config["domains"]["animals"]["n_seeds"] = available + 1
    with pytest.raises(ConfigError) as error:
        validate_config(tiny_config)
    assert str(error.value) == (
        f"config key 'domains.animals.n_seeds': {available + 1} requested but the taxonomy "
        f"config/taxonomy/animals.yaml enumerates only {available} seeds"
    )


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        (
            'meadow: {template: "a {subject} in a grassy meadow with {aux}"',
            'meadow: {template: "a {subject} in a grassy {place} with {aux}"',
            "key 'scenes.meadow.template': unknown placeholder {place} (it may use {subject}, {aux})",
        ),
        (
            'meadow: {template: "a {subject} in a grassy meadow with {aux}"',
            'meadow: {template: "a {subject} in a grassy meadow with {aux} and {value}"',
            "key 'scenes.meadow.template': unknown placeholder {value} (it may use {subject}, {aux})",
        ),
        (
            'meadow: {template: "a {subject} in a grassy meadow with {aux}"',
            'meadow: {template: "a {subject} in a {} meadow with {aux}"',
            "key 'scenes.meadow.template': unknown placeholder {} (it may use {subject}, {aux})",
        ),
        (
            'colour_tone: {values: [red, blue, yellow, white, black], phrase: "a {value} {aux}"',
            'colour_tone: {values: [red, blue, yellow, white, black], phrase: "a {value} {aux} in {colour}"',
            "key 'knobs.colour_tone.phrase': unknown placeholder {colour} (it may use {value}, {aux}, {subject})",
        ),
        (
            'phrase: "{value} {aux}"',
            'phrase: "{value} {aux}}"',
            "key 'knobs.count.phrase': cannot fill in: Single '}' encountered in format string "
            "(it may use {value}, {aux}, {subject})",
        ),
    ],
)
def test_a_template_naming_an_unknown_placeholder_is_refused_when_the_config_is_checked(
    tiny_config, tmp_path, old, new, says
):
    text = taxonomy_path("animals").read_text()
    assert text.count(old) == 1
    path = tmp_path / "animals.yaml"
    path.write_text(text.replace(old, new))
    tiny_config["domains"]["animals"]["taxonomy"] = str(path)
    with pytest.raises(ConfigError) as error:
        validate_config(tiny_config)
    assert str(error.value) == f"taxonomy {path} {says}"


def test_every_placeholder_a_template_may_use_is_filled_in():
    """What load_taxonomy lets a scene and a knob's phrase name is what `draft` fills in."""
    scene = " ".join("{" + name + "}" for name in taxonomy_module.PLACEHOLDERS["scenes"])
    phrase = " ".join("{" + name + "}" for name in taxonomy_module.PLACEHOLDERS["knobs"])
    assert (scene, phrase) == ("{subject} {aux}", "{value} {aux} {subject}")
    assert draft(scene, phrase, "bird", "stone", "behind") == "bird behind stone bird"
