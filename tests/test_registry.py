"""The registry's tables (`blindspot.registry`) agree with what implements and documents them."""

import yaml

from blindspot.models.api.vlm import ANSWERERS
from blindspot.models.textgen import GENERATORS
from blindspot.models.vlm_scoring import SCORERS
from blindspot.paths import SCHEMA_DIR
from blindspot.registry import BACKENDS, MODEL_GROUPS, ROLES, RUN_ONLY_KEYS, Role, placed_models


def test_the_adapters_implement_the_backends_the_registry_lets_serve_text_and_images():
    assert set(GENERATORS) == {name for name, backend in BACKENDS.items() if "text" in backend.serves}
    assert set(SCORERS) == {name for name, backend in BACKENDS.items() if "images" in backend.serves}
    assert set(ANSWERERS) == {name for name, backend in BACKENDS.items() if "answers" in backend.serves}


def test_the_schema_offers_the_registrys_backends():
    schema = yaml.safe_load((SCHEMA_DIR / "config.schema.yaml").read_text())
    assert set(schema["$defs"]["model"]["properties"]["backend"]["enum"]) == set(BACKENDS)


def test_the_schema_offers_the_registrys_model_groups_in_their_order_and_a_group_keys_no_result():
    schema = yaml.safe_load((SCHEMA_DIR / "config.schema.yaml").read_text())
    assert schema["$defs"]["model"]["properties"]["group"]["enum"] == list(MODEL_GROUPS)
    assert "group" in RUN_ONLY_KEYS


def test_every_role_can_be_served_and_every_config_places_registry_models(tiny_config, paper_config):
    assert all(role.backends for role in ROLES)
    for config in (tiny_config, paper_config):
        assert {name for _, name in placed_models(config)} <= set(config["models"])


def test_a_role_takes_the_backends_that_serve_its_kind():
    assert Role("x", "text").backends == ("vllm", "transformers")
    assert Role("x", "lora").backends == ("transformers",)
    assert Role("x", "nothing").backends == ()


def test_placed_models_lists_each_name_of_each_role_set():
    config = {"prompt_stage": {"generators": ["a", "b"], "judges": "c"}, "humblebench": {"scene_graphs": None}}
    assert [(role.key, name) for role, name in placed_models(config)] == [
        ("prompt_stage.generators", "a"),
        ("prompt_stage.generators", "b"),
        ("prompt_stage.judges", "c"),
    ]


def test_the_steps_load_models_by_their_roles_keys():
    from blindspot.catalogue import STEPS

    keys = {role.key for role in ROLES}
    loaded = {key for step in STEPS.values() for key in step.loads if "." in key}
    assert loaded <= keys, loaded - keys
