import copy
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers.benchmark import export_small_benchmark
from helpers.evaluate import EVALUATED_TYPES, docs_example, evaluate_humblebench
from helpers.images import grey_image
from helpers.plugins import COLOUR_PAIRS, LOCAL_MODULE, docs_file, solid
from helpers.scene_graphs import make_scene_graphs
from helpers.workflow import REPO, SCENE_GRAPHS, quick_start_run, seed_from, snakemake
from PIL import Image

# Hub ids must fail fast, never hang on a network that is not there.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


# Fixtures that build models or run the workflow (minutes each): a test that requests one, directly or
# through another fixture, is `slow` whether or not it says so, so no test pulls them into the fast tier
# (`-m "not slow"`) by a forgotten mark. The tiny_* ones build a metric's tiny model (tests/metrics/).
HEAVY_FIXTURES = frozenset(
    {
        "built_config",
        "tiny_run",
        "side_by_side",
        "tiny_blip2",
        "tiny_clip_flant5",
        "tiny_hpsv2",
        "tiny_image_reward",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `slow` every test whose fixture closure holds a heavy fixture."""
    for item in items:
        if HEAVY_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def tiny_config() -> dict:
    return yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())


@pytest.fixture
def paper_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.fixture(scope="session")
def built_config(tmp_path_factory) -> dict:
    """The tiny config with every model built (once per session) into a temporary resources dir."""
    from blindspot.models.spec import resolved_recipe
    from blindspot.tiny.build import build_model

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


@pytest.fixture(scope="session")
def run_config(tmp_path_factory) -> dict:
    """The tiny preset as the run uses it: HumbleBench also writes questions from a test scene-graph file."""
    config = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    graphs = make_scene_graphs(tmp_path_factory.mktemp("scene_graphs"))
    config["humblebench"]["scene_graphs"] = SCENE_GRAPHS | {"file": str(graphs)}
    return config


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, run_config):
    """The README quick start, in a copy of the checkout: the tiny preset end to end. One run per
    session, shared by tests/workflow/test_rule_envs.py (which copies it first) and tests/workflow/test_workflow.py
    (whose tests go on from it). Seeded from the checkout's own quick start when this code made it
    (`quick_start_run`), so a CI run makes the tiny preset once, not twice."""
    work = tmp_path_factory.mktemp("checkout")
    for part in ("workflow", "config", "profiles", "src"):
        shutil.copytree(REPO / part, work / part, symlinks=True)
    (work / "config" / "tiny.yaml").write_text(yaml.safe_dump(run_config, sort_keys=False))
    (work / "resources").mkdir()
    quick_start = quick_start_run(run_config["results_dir"])
    if quick_start is not None:
        seed_from(quick_start, work, run_config["results_dir"])
    (work / "resources" / "downloads").symlink_to(REPO / "resources" / "downloads")
    log = snakemake("--profile", "profiles/local", "-c2", cwd=work)
    return work, log


@pytest.fixture
def exported(tmp_path):
    """A small benchmark with both splits, grey images, exported: (its pairs, the folder)."""
    return export_small_benchmark(
        tmp_path, lambda path, role, i: grey_image(path, 10 * i + (role == "adv")), lambda i: f"a bird {i}"
    )


@pytest.fixture(scope="session")
def humble_release(tmp_path_factory) -> Path:
    """Four questions of a HumbleBench release, each with its image."""
    folder = tmp_path_factory.mktemp("release")
    records = []
    for i, kind in enumerate(EVALUATED_TYPES):
        Image.fromarray(np.full((16, 16, 3), 40 * i, dtype=np.uint8)).save(folder / f"image{i}.png")
        records.append(
            {
                "question_id": f"q{i}",
                "label": "ABCE"[i],
                "type": kind,
                "image": f"image{i}.png",
                "question": f"What is {i}?\nA. a\nB. b\nC. c\nD. d\nE. None of the above",
            }
        )
    (folder / "release.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return folder / "release.jsonl"


@pytest.fixture(scope="session")
def side_by_side(humble_release, tmp_path_factory) -> tuple[Path, Path]:
    """Two evaluations of one release at once, in two results folders: one by the command, one through
    `blindspot.api.evaluate` in a fresh Python process (the docs' example). Both must be running at once, and
    both finish. tests/evaluate/test_evaluate_state.py and tests/evaluate/test_evaluate_records.py read them."""
    folder = tmp_path_factory.mktemp("side_by_side")
    by_command, by_python = folder / "command", folder / "my-evaluation"
    for path in humble_release.parent.iterdir():  # the docs' example reads release.jsonl from where it runs
        shutil.copy(path, folder)
    script = docs_example()
    # output to files: a pipe nobody reads while the two run would fill and stop them
    started = [
        subprocess.Popen(argv, cwd=folder, stdout=(folder / f"{name}.out").open("w"), stderr=subprocess.STDOUT)
        for name, argv in (
            ("command", evaluate_humblebench(humble_release, by_command)),
            ("python", [sys.executable, "-c", script]),
        )
    ]
    # Both workflows started (each has its own Snakemake log in its own folder) before either ended.
    deadline = time.monotonic() + 600
    while not all(list((results / ".snakemake" / "log").glob("*.log")) for results in (by_command, by_python)):
        assert all(process.poll() is None for process in started), "one evaluation ended before the other started"
        assert time.monotonic() < deadline
        time.sleep(0.5)
    for name, process in zip(("command", "python"), started, strict=True):
        assert process.wait(timeout=1200) == 0, (folder / f"{name}.out").read_text()[-3000:]
    return by_command, by_python


# The example plug-in of docs/metrics.md: tests/metrics/test_plugins.py and tests/evaluate/ load it.
@pytest.fixture
def local_plugin(tmp_path, monkeypatch) -> Path:
    """The example plug-in as a module in a folder on the Python path."""
    folder = tmp_path / "local"
    folder.mkdir()
    (folder / f"{LOCAL_MODULE}.py").write_text(docs_file("colour_share.py"))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, LOCAL_MODULE, raising=False)
    yield folder
    sys.modules.pop(LOCAL_MODULE, None)


@pytest.fixture
def colour_exported(tmp_path):
    """A small exported benchmark whose prompts name red and whose images are solid colours: (its pairs
    with `right`, each pair's designed outcome; the folder)."""

    def image(path, role, i):
        red, green, blue = COLOUR_PAIRS[i % 3][role == "adv"]
        solid((red, green, blue - i if blue > 128 else blue + i)).save(path)  # a shade off by i: no two files alike
        return str(path)

    benchmark, dataset = export_small_benchmark(tmp_path, image, lambda i: f"a red bird {i}")
    return benchmark.assign(right=[COLOUR_PAIRS[i % 3][2] for i in range(len(benchmark))]), dataset
