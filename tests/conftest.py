import copy
import os
from pathlib import Path

import pytest
import yaml

# Hub ids must fail fast, never hang on a network that is not there.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
# Debian's chromium (./setup.sh --browser), which the `browser` tests drive through Playwright.
CHROMIUM = os.environ.get("BLINDSPOT_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture
def tiny_config() -> dict:
    return yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())


@pytest.fixture
def paper_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.fixture(scope="session")
def built_config(tmp_path_factory) -> dict:
    """The tiny config with every model built (once per session) into a temporary resources dir."""
    from blindspot.config import resolved_recipe
    from blindspot.tiny_models import build_model

    config = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    config = copy.deepcopy(config)
    config["resources_dir"] = str(tmp_path_factory.mktemp("resources"))
    built = {name: entry for name, entry in config["models"].items() if "build" in entry}
    for entry in built.values():
        if "archive" in entry["build"]:
            entry["build"]["archive"] = str(REPO / entry["build"]["archive"])
    # Build order: models whose tokenizer others borrow come first.
    for name in sorted(built, key=lambda n: "tokenizer_from" in built[n]["build"]):
        build_model(Path(config["resources_dir"]) / "models" / name, resolved_recipe(config, name), config["seed"])
    return config
