"""The docs a newcomer reads: generated pages up to date, the rule table equal to the workflow's
rules, every config key documented, and no relative link that points nowhere."""

import re
from pathlib import Path

import pytest
from conftest import REPO, snakemake

from blindspot import docs
from blindspot.targets import PATHS

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_generated_pages_are_up_to_date():
    assert docs.stale_pages() == [], "run `python -m blindspot.docs`"


def test_check_mode_names_a_stale_page_and_exits_1(tmp_path, capsys):
    docs.main(["--docs-dir", str(tmp_path)])
    assert docs.stale_pages(tmp_path) == []
    (tmp_path / "config.md").write_text((tmp_path / "config.md").read_text().replace("`seed`", "`sead`"))
    with pytest.raises(SystemExit) as exited:
        docs.main(["--check", "--docs-dir", str(tmp_path)])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'config.md'} is out of date" in err
    assert "outputs.md" not in err


def test_every_output_kind_and_placeholder_has_a_description():
    assert set(docs.OUTPUT_DESCRIPTIONS) == set(PATHS)
    used = {name for pattern in PATHS.values() for name in docs.placeholders(pattern)}
    assert used <= set(docs.PLACEHOLDERS)


def _rule_table(page: Path) -> set[str]:
    section = page.read_text().split("\n## The rules\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", section, flags=re.M))


@pytest.mark.integration
def test_rule_lists_equal_the_workflows_rules():
    # one rule a line, a rule with a docstring followed by it in parentheses
    rules = set(re.findall(r"^(\w+)(?: \(.*\))?$", snakemake("--list-rules"), flags=re.M))
    assert "render_images" in rules
    assert _rule_table(REPO / "docs" / "usage.md") == rules
    # the README's overview of the stages names every rule too (`all` aside)
    overview = (REPO / "README.md").read_text().split("## What the workflow does", 1)[1].split("```")[1]
    assert set(re.findall(r"\b[a-z0-9]+(?:_[a-z0-9]+)+\b", overview)) == rules - {"all"}


def _schema_property_names(node) -> set[str]:
    """Every property name anywhere in the schema, found without the docs' own walk."""
    found = set()
    if isinstance(node, dict):
        found |= set(node.get("properties", {}))
        for value in node.values():
            found |= _schema_property_names(value)
    elif isinstance(node, list):
        for value in node:
            found |= _schema_property_names(value)
    return found


def test_every_schema_key_is_on_the_config_page():
    page = (REPO / "docs" / "config.md").read_text()
    documented = {key.rsplit(".", 1)[-1] for key in re.findall(r"^\| `([\w.<>-]+)` \|", page, flags=re.M)}
    missing = _schema_property_names(docs.load_schema()) - documented
    assert not missing, f"config keys missing from docs/config.md: {sorted(missing)}"


def test_config_page_shows_defaults_map_keys_and_refs():
    keys = {key.key: key for key in docs.config_keys(docs.load_schema())}
    assert keys["allow_cpu"].default == "false"
    assert keys["domains.<name>.n_seeds"].required
    assert keys["models.<name>.generation.max_tokens"].default == "256"  # through $defs/model
    assert keys["prompt_stage.generators"].type == "list of string"  # through $defs/model_names
    assert keys["evaluation.families"].type == "map of string"


def _stray_keys(node, path=""):
    """Keys with no value: what YAML makes of an unquoted comma inside a flow mapping's text."""
    if isinstance(node, dict):
        for key, value in node.items():
            if value is None and key != "default":
                yield f"{path}/{key}"
            yield from _stray_keys(value, f"{path}/{key}")
    elif isinstance(node, list):
        for value in node:
            yield from _stray_keys(value, path)


def test_schema_descriptions_are_whole():
    assert list(_stray_keys(docs.load_schema())) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_relative_links_point_to_files(page):
    links = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    relative = [link.split("#")[0] for link in links if not re.match(r"^(\w+:|#)", link)]
    broken = [link for link in relative if not (page.parent / link).exists()]
    assert not broken, f"{page.name}: broken links {broken}"


def _ledger_rows() -> dict[str, str]:
    """The fidelity ledger's rows: id -> its config-key cell."""
    rows = re.findall(r"^\| ([PH]\d+) \|.*\| ([^|]*) \|$", (REPO / "docs" / "fidelity.md").read_text(), flags=re.M)
    return dict(rows)


def test_every_ledger_row_with_a_config_key_is_pointed_to_from_the_config_and_back():
    rows = _ledger_rows()
    assert len(rows) >= 10
    configs = [REPO / "config" / "config.yaml", *sorted((REPO / "config" / "taxonomy").glob("*.yaml"))]
    pointers = {match for path in configs for match in re.findall(r"docs/fidelity\.md ([PH]\d+)", path.read_text())}
    with_a_key = {row for row, key in rows.items() if not key.strip().startswith("(")}
    assert with_a_key - pointers == set(), "rows whose config key has no comment naming them"
    assert pointers - set(rows) == set(), "config comments naming no row of docs/fidelity.md"
