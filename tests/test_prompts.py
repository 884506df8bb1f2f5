import jinja2
import pytest
from conftest import REPO

from blindspot.prompts import PromptTemplate
from blindspot.protobias.taxonomy import enumerate_seeds, load_taxonomy


def test_generate_template_renders_the_seed_into_chat_messages():
    template = PromptTemplate.load(REPO / "config" / "prompts" / "generate_triplet_v2.yaml")
    seed = enumerate_seeds(load_taxonomy(REPO / "config" / "taxonomy" / "animals.yaml", "animals"))[0]
    system, user = template.render(seed=seed)
    assert (system["role"], user["role"]) == ("system", "user")
    for field in ("draft_neutral", "draft_correct", "draft_adversarial", "correct_instance", "adversarial_value"):
        assert seed[field] in user["content"]
    assert template.version.startswith("generate_triplet/v2+")


def test_a_field_the_template_needs_but_lacks_is_an_error():
    template = PromptTemplate.load(REPO / "config" / "prompts" / "judge_triplet_v1.yaml")
    with pytest.raises(jinja2.UndefinedError):
        template.render(seed={"label": "bird"})


def test_version_changes_with_the_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nversion: 3\nsystem: s\nuser: 'u {{ x }}'\n")
    before = PromptTemplate.load(path)
    path.write_text("name: t\nversion: 3\nsystem: s\nuser: 'u! {{ x }}'\n")
    after = PromptTemplate.load(path)
    assert before.version.split("+")[0] == after.version.split("+")[0] == "t/v3"
    assert before.version != after.version
    path.write_text("name: t\nsystem: s\nuser: u\n")
    with pytest.raises(ValueError, match="version"):
        PromptTemplate.load(path)
