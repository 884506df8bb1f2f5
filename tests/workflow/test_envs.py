"""The per-rule conda envs (for the cluster) pin what the tests here run with."""

from importlib import metadata

import pytest
from helpers.envs import lock, pins
from packaging.version import Version

from blindspot.catalogue import env_requirements
from blindspot.paths import ENV_DIR

# Which locked requirements file each env must agree with.
LOCKS = {
    "base": "test.txt",
    "build": "test.txt",
    "nlp": "test.txt",
    "t2i": "test.txt",
    "vlm": "test.txt",
    "iqa": "test.txt",
    "export": "test.txt",
    "llm": "vllm.txt",
}


def env_pins(env: str) -> dict[str, str]:
    return pins(env_requirements(env))


def test_every_rule_env_has_a_lock():
    assert {p.stem for p in ENV_DIR.glob("*.yaml")} == set(LOCKS)


@pytest.mark.parametrize("env", sorted(LOCKS))
def test_env_pins_equal_the_tested_versions(env):
    env_versions = env_pins(env)
    locked = lock(LOCKS[env])
    assert env_versions, env
    mismatched = {name: (v, locked.get(name)) for name, v in env_versions.items() if locked.get(name) != v}
    assert not mismatched, f"{env}.yaml pins differ from requirements/{LOCKS[env]}: {mismatched}"


def same_release(installed: str | None, locked: str) -> bool:
    """Whether an installed version is the locked one, a local build tag (torch's "+cpu") aside."""
    return installed is not None and Version(Version(installed).public) == Version(locked)


def test_same_release_compares_whole_versions():
    assert same_release("2.14.1", "2.14.1")
    assert same_release("2.14.1+cpu", "2.14.1")
    for installed in ("1.20.0", "2.14.10", "2.14.1rc1", None):
        assert not same_release(installed, "1.2" if installed == "1.20.0" else "2.14.1"), installed


def test_the_test_environment_is_the_locked_one():
    installed = {}
    for name in lock("test.txt"):
        try:
            installed[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed[name] = None
    differing = {n: (v, installed[n]) for n, v in lock("test.txt").items() if not same_release(installed[n], v)}
    assert not differing, f"requirements/test.txt vs installed: {differing}"
