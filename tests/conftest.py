import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image
from scene_graphs import make_scene_graphs

# Hub ids must fail fast, never hang on a network that is not there.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
# Debian's chromium (./setup.sh --browser), which the `browser` tests drive through Playwright.
CHROMIUM = os.environ.get("BLINDSPOT_CHROMIUM", "/usr/bin/chromium")
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def snakemake(*args, cwd=REPO, check=True):
    result = subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=2400)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result.stdout + result.stderr


def step_command(folder: Path, step: str, **arguments) -> list[str]:
    """The arguments of `python` that run one step with these arguments, as a job is replayed from the
    file it leaves beside its log (`python -m blindspot.steps replay`)."""
    path = folder / f"{step}.job.json"
    path.write_text(json.dumps({"step": step, "arguments": arguments}, default=str))
    return ["-m", "blindspot.steps", "replay", str(path)]


def spec_of(config: dict, name: str) -> dict:
    """A model as its rule hands it to a step: the resolved registry entry."""
    from blindspot.models.spec import model_spec

    return dataclasses.asdict(model_spec(config, name))


def local_rules() -> set[str]:
    """The rules that run on the submit host, never on SLURM: the catalogue's local steps and `all`."""
    from blindspot.catalogue import LOCAL_STEPS

    return {"all", *LOCAL_STEPS}


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


SCENE_GRAPHS = {
    "describer": "tiny-qwen2.5-vl",
    "writer": "smollm2-135m",
    "writer_max_tokens": 600,
    "cue_tokens": 6,
    "cue_instruction": "Describe the colour and material of the {category} in a few words.",
    "template": "config/prompts/humble_scene_questions_v1.yaml",
    "verification": None,
}


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
    session, shared by tests/test_rule_envs.py (which copies it first) and tests/test_workflow.py
    (whose tests go on from it)."""
    work = tmp_path_factory.mktemp("checkout")
    for part in ("workflow", "config", "profiles", "src"):
        shutil.copytree(REPO / part, work / part, symlinks=True)
    (work / "config" / "tiny.yaml").write_text(yaml.safe_dump(run_config, sort_keys=False))
    (work / "resources").mkdir()
    (work / "resources" / "downloads").symlink_to(REPO / "resources" / "downloads")
    log = snakemake("--profile", "profiles/local", "-c2", cwd=work)
    return work, log


def copy_run(run: Path, work: Path) -> Path:
    """A copy of a finished run's checkout at `work`, its built models hard links (nothing writes into a
    model's files, and they are most of the run's size): tests that change what later tests plan from
    go on in a copy."""
    models = run / "resources" / "models"

    def link_models(source: str, target: str) -> None:
        (os.link if Path(source).is_relative_to(models) else shutil.copy2)(source, target)

    shutil.copytree(run, work, symlinks=True, copy_function=link_models)
    return work


def whitespace_outside_strings(text: str) -> list[int]:
    """Where JSON text has whitespace between its tokens (constrained decoding allows none, with the
    separators "," and ":" on both backends)."""
    found, in_string, escaped = [], False, False
    for at, char in enumerate(text):
        if in_string:
            escaped, in_string = (not escaped and char == "\\"), in_string and (escaped or char != '"')
        elif char == '"':
            in_string = True
        elif char.isspace():
            found.append(at)
    return found


def half_written_temps(entry: Path, key: str, text: str) -> tuple[Path, Path]:
    """Two temporaries beside a cache `entry` (named as atomic_path names them), each holding `text`: a
    killed writer's of the entry itself, and another job's, of another key in the same folder, being written."""
    entry.parent.mkdir(parents=True)
    left = entry.with_name(f".{entry.name}.0123abcd.tmp")
    others = entry.with_name(f".{key[:2]}{'0' * 14}.json.4567cdef.tmp")
    for temporary in (left, others):
        temporary.write_text(text)
    return left, others


def grey_image(path, value) -> str:
    """An 8x8 grey PNG of `value` at `path`; its path."""
    Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(path)
    return str(path)


def export_small_benchmark(folder, image, prompt) -> tuple[pd.DataFrame, Path]:
    """Eight pairs with both splits, exported as `export_dataset` writes it into `folder`/dataset, their
    images made by `image(path, role, row)` and neutral prompts by `prompt(row)`: (the pairs, the folder)."""
    from test_split import benchmark_pairs

    from blindspot.protobias.export import export_dataset
    from blindspot.protobias.split import assign_splits

    pairs = benchmark_pairs(8, models=("flux",))
    for role in ("corr", "adv"):
        pairs[f"{role}_path"] = [image(folder / f"{role}{i}.png", role, i) for i in range(len(pairs))]
    pairs = pairs.assign(
        subcategory="birds",
        neutral_prompt=[prompt(i) for i in range(len(pairs))],
        correct_description="d_c",
        adversarial_description="d_a",
        correct_instance="penguin",
        adversarial_instance="robin",
        aux_element="stone",
        knob="count",
        correct_value="one",
        adversarial_value="two",
        seed=7,
        generator="g",
        added_entries="",
    )
    benchmark = assign_splits(pairs, 1, 0.5)
    assert set(benchmark["split"]) == {"train", "test"}
    export_dataset(benchmark, folder / "dataset", {"name": "T", "run_name": "r", "threshold": 8, "models": []})
    return benchmark, folder / "dataset"


@pytest.fixture
def exported(tmp_path):
    """A small benchmark with both splits, grey images, exported: (its pairs, the folder)."""
    return export_small_benchmark(
        tmp_path, lambda path, role, i: grey_image(path, 10 * i + (role == "adv")), lambda i: f"a bird {i}"
    )


# `blindspot evaluate humblebench` as people run it: shared by the tests of its state and its records.
EVALUATED_TYPES = ("Object", "Attribute", "Relation", "Object")
# Tables 4-6 need the config's original and stress settings; noise adds a third answer job to be cut off in.
EVALUATED_SETTINGS = ("original", "nota_only", "noise")


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


def _evaluate_options(release: Path, results: Path) -> list[str]:
    settings = [part for name in EVALUATED_SETTINGS for part in ("--setting", name)]
    return ["--release", str(release), "--vlm", "tiny-qwen2.5-vl", *settings, "--results-dir", str(results)]


def docs_example() -> str:
    """The Python example of docs/usage.md (From Python), as a notebook runs it."""
    text = (REPO / "docs" / "usage.md").read_text()
    return text.split("<!-- evaluate-example:", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def evaluate_humblebench(release: Path, results: Path) -> list[str]:
    """`blindspot evaluate humblebench` of `release` into `results` by the tiny Qwen2.5-VL, as a command line."""
    evaluate = [sys.executable, "-m", "blindspot.cli", "evaluate", "humblebench"]
    return [*evaluate, *_evaluate_options(release, results), "--cores", "1"]


@pytest.fixture(scope="session")
def side_by_side(humble_release, tmp_path_factory) -> tuple[Path, Path]:
    """Two evaluations of one release at once, in two results folders: one by the command, one through
    `blindspot.api.evaluate` in a fresh Python process (the docs' example). Both must be running at once, and
    both finish. tests/test_evaluate_state.py and tests/test_evaluate_records.py read them."""
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
