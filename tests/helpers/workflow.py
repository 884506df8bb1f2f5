import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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


SCENE_GRAPHS = {
    "describer": "tiny-qwen2.5-vl",
    "writer": "smollm2-135m",
    "writer_max_tokens": 600,
    "cue_tokens": 6,
    "cue_instruction": "Describe the colour and material of the {category} in a few words.",
    "template": "config/prompts/humble_scene_questions_v1.yaml",
    "verification": None,
}


def copy_run(run: Path, work: Path) -> Path:
    """A copy of a finished run's checkout at `work`, its built models hard links (nothing writes into a
    model's files, and they are most of the run's size): tests that change what later tests plan from
    go on in a copy."""
    models = run / "resources" / "models"

    def link_models(source: str, target: str) -> None:
        (os.link if Path(source).is_relative_to(models) else shutil.copy2)(source, target)

    shutil.copytree(run, work, symlinks=True, copy_function=link_models)
    return work


def quick_start_run(results_dir: str) -> Path | None:
    """The checkout itself when its own quick start (the README's first command) finished there with this
    code: every counter it wrote names the checkout's commit, nothing under src/, workflow/ or config/
    has changed since, and Snakemake's record of its jobs is there. A test run seeded from it makes only
    what its own config adds (HumbleBench's scene-graph questions) and what that changes, as Snakemake
    decides; CI runs the quick start first. None otherwise (or with BLINDSPOT_FRESH_TINY_RUN=1)."""
    results = REPO / results_dir
    counters = sorted(results.rglob("*counters.json")) if results.is_dir() else []
    if os.environ.get("BLINDSPOT_FRESH_TINY_RUN") == "1" or not counters:
        return None
    if not (REPO / ".snakemake" / "metadata").is_dir() or not (REPO / "resources" / "models").is_dir():
        return None

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else "unknown"

    if git("status", "--porcelain", "--", "src", "workflow", "config") != "":
        return None
    head = git("rev-parse", "HEAD")
    commits = {json.loads(path.read_text()).get("provenance", {}).get("git_commit") for path in counters}
    return REPO if commits == {head} else None


def seed_from(run: Path, work: Path, results_dir: str) -> None:
    """`run`'s results, built models (hard links: nothing writes into a model's files) and Snakemake's
    record of its jobs, copied into `work` with their times, so Snakemake there re-runs only what differs."""
    shutil.copytree(run / results_dir, work / results_dir, symlinks=True)
    shutil.copytree(run / ".snakemake" / "metadata", work / ".snakemake" / "metadata")
    shutil.copytree(run / "resources" / "models", work / "resources" / "models", copy_function=os.link)
