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


def test_the_humblebench_prompts_are_the_official_prefixes_before_the_question_and_no_system_message():
    fields = {"question": "What colour is the car?", "options": "A. red\nE. None of the above", "letters": "A, E"}
    original = PromptTemplate.load(REPO / "config" / "prompts" / "humble_original_v2.yaml").render(**fields)
    assert [message["role"] for message in original] == ["user"]
    question = original[0]["content"]
    assert question.startswith("What colour is the car?\nA. red\nE. None of the above\n")
    for name, first in (("cautious", "Be highly cautious."), ("grounding", "Base your answer strictly")):
        [message] = PromptTemplate.load(REPO / "config" / "prompts" / f"humble_{name}_v2.yaml").render(**fields)
        prefix, _, rest = message["content"].partition("\n\n\n")  # the official prompt ends in a newline
        assert prefix.startswith("You are answering a visual multiple-choice question.\n\n" + first)
        assert rest == question


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is not a mapping"),
        ("name: t\nversion: 1\nuser: [unclosed\n", "is not YAML"),
        ("name: t\nuser: u\n", r"lacks \['version'\]"),
        ("name: t\nversion: 1\nuser: 'u {{ x '\n", "its user message, line 1"),
    ],
)
def test_a_broken_template_is_one_line_naming_its_file(tmp_path, text, says):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=says) as error:
        PromptTemplate.load(path)
    assert str(path) in str(error.value)
    assert "\n" not in str(error.value)
