import pytest
from helpers.workflow import REPO

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


def test_a_field_the_template_needs_but_lacks_is_one_line_naming_the_file():
    path = REPO / "config" / "prompts" / "judge_triplet_v1.yaml"
    with pytest.raises(ValueError, match=rf"^prompt template {path}: 'dict object' has no attribute '\w+'$"):
        PromptTemplate.load(path).render(seed={"label": "bird"})


def test_version_changes_with_the_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nversion: 3\nsystem: s\nuser: 'u {{ x }}'\n")
    before = PromptTemplate.load(path)
    path.write_text("name: t\nversion: 3\nsystem: s\nuser: 'u! {{ x }}'\n")
    after = PromptTemplate.load(path)
    assert before.version.split("+")[0] == after.version.split("+")[0] == "t/v3"
    assert before.version != after.version
    path.write_text("# a comment\nname: t\nversion: 3\nsystem: s\nuser: 'u! {{ x }}'  # another\n")
    assert PromptTemplate.load(path).version == after.version  # comments are not the template
    path.write_text("name: t\nsystem: s\nuser: u\n")
    with pytest.raises(ValueError, match="version"):
        PromptTemplate.load(path)


def test_the_humblebench_prompts_are_the_official_prefixes_before_the_question_and_no_system_message():
    fields = {"question": "What colour is the car?", "options": "A. red\nE. None of the above", "letters": "A, E"}
    prompts = REPO / "config" / "prompts"
    [original] = PromptTemplate.load(prompts / "humble_original_v4.yaml").render(**fields)
    question = original["content"]
    assert question == "What colour is the car?\nA. red\nE. None of the above"  # the release's question text
    # the letter prompt: the question, then the official NOT_REASONING_POST_PROMPT (HumbleBench/utils/constant.py)
    assert PromptTemplate.load(prompts / "humble_letter_v1.yaml").render(question=question) == [
        {
            "role": "user",
            "content": question + "\nPlease respond with only the letter of the correct choice (A, B, C, D, or E). "
            "Do not include the option text or any other explanation.",
        }
    ]
    for name, first in (("cautious", "Be highly cautious."), ("grounding", "Base your answer strictly")):
        [message] = PromptTemplate.load(prompts / f"humble_{name}_v4.yaml").render(**fields)
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
        ("name: t\nversion: 1\nsytem: s\nuser: u\n", "unknown key 'sytem'"),  # would drop the system message
        ("name: t\nversion: 1\nuser: [a, b]\n", "its user message is not text"),
    ],
)
def test_a_broken_template_is_one_line_naming_its_file(tmp_path, text, says):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=says) as error:
        PromptTemplate.load(path)
    assert str(path) in str(error.value)
    assert "\n" not in str(error.value)


def test_the_judge_image_rubric_is_exposed_and_renders_the_messages_as_before_it_was_split_out():
    """The rubric moved into `rubric:` (shown to the filter evaluators too); the VLMs' messages are
    byte for byte what the template rendered before."""
    template = PromptTemplate.load(REPO / "config" / "prompts" / "judge_image_v1.yaml")
    assert template.render(description="a red fox sitting on a blue chair") == [
        {"role": "system", "content": "You check whether an image shows exactly what its description says."},
        {
            "role": "user",
            "content": (
                "Description: a red fox sitting on a blue chair\n\n"
                "Score how well the image matches the description on a scale from 1 to 10. Check the main\n"
                "subject, the number of each object, colours, sizes, spatial relations and what is in the\n"
                "foreground or background. 10: everything is present and correct. 8-9: everything is present,\n"
                "with at most minor ambiguity. 4-7: the subject is right but a stated detail is wrong or missing.\n"
                "1-3: the subject is wrong or missing. Answer with the number only."
            ),
        },
    ]
    assert template.rubric.startswith("Score how well the image matches the description on a scale from 1 to 10.")
    assert template.rubric.endswith("1-3: the subject is wrong or missing.")  # the answer format is the VLMs' alone
    assert template.version.startswith("judge_image/v1+")


def test_a_rubric_is_the_template_s_own_and_never_a_field(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nversion: 1\nrubric: |-\n  Be strict.\n  Very.\nuser: '{{ x }}: {{ rubric }}'\n")
    template = PromptTemplate.load(path)
    assert template.rubric == "Be strict.\nVery."
    assert template.render(x="go") == [{"role": "user", "content": "go: Be strict.\nVery."}]
    with pytest.raises(ValueError, match="rubric"):
        template.render(x="go", rubric="Be lenient.")
    path.write_text("name: t\nversion: 1\nuser: '{{ x }}'\n")  # a template without one: an empty rubric
    assert PromptTemplate.load(path).rubric == ""
    path.write_text("name: t\nversion: 1\nrubric: [a, b]\nuser: u\n")
    with pytest.raises(ValueError, match="its rubric is not text"):
        PromptTemplate.load(path)
