"""The root conftest's collection hook: a test on a heavy fixture is `slow` without a mark of its own."""

import shutil

from helpers.workflow import REPO

TESTS = """
import pytest


@pytest.fixture
def through_another(built_config):
    return built_config


def test_on_a_heavy_fixture_through_another(through_another):
    pass


def test_on_a_heavy_fixture_itself(tiny_run):
    pass


def test_on_a_light_fixture(tiny_config):
    pass
"""


def test_a_test_on_a_heavy_fixture_is_left_out_of_the_fast_tier(pytester):
    shutil.copy(REPO / "tests" / "conftest.py", pytester.path)  # its helpers are read from tests/helpers
    pytester.makepyfile(test_heavy=TESTS)
    ini = f"[pytest]\npythonpath = {REPO / 'tests'}\nmarkers =\n    slow: heavy\n"
    (pytester.path / "pytest.ini").write_text(ini)
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-m", "not slow", "-p", "no:cacheprovider")
    assert result.ret == 0, result.outlines
    collected = [line for line in result.outlines if "::" in line]
    assert collected == ["test_heavy.py::test_on_a_light_fixture"]
    assert "1/3 tests collected (2 deselected)" in result.stdout.str()
