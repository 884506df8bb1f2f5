"""A metric plug-in that loads no registry model (its config entry without `model`, `--metric PLUGIN@none`,
or a class that says `registry_model = False`), and scoring prompts and images in memory (`blindspot.api.Scorer`).
The plug-in is docs/metrics.md's ColourShare, as tests/metrics/test_plugins.py loads it."""

import json
import math
import os
import re
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from helpers.plugins import BLUE, LOCAL_MODULE, PLUGIN, RED, solid, write_benchmark_inputs
from helpers.workflow import REPO

from blindspot import schemas
from blindspot.catalogue import job_env
from blindspot.checks import validate_config
from blindspot.config import ConfigError
from blindspot.evaluate.config import metric_entries, protobias_config
from blindspot.io import read_table
from blindspot.plan import job_table
from blindspot.plugins import plugin_code
from blindspot.protobias.metric_scores import metric_identity, metric_score_settings
from blindspot.resources import job_resources

USAGE = (REPO / "docs" / "usage.md").read_text()


def model_free(**more) -> dict:
    return {"plugin": PLUGIN, "label": "Colour share", "family": "embedding", "args": {"size": 8}} | more


def score_job(config: dict, metric: str) -> dict:
    wildcards = {"domain": next(iter(config["domains"])), "metric": metric, "shard": "00000"}
    return job_resources(config, "score_metric", wildcards).as_dict()


def test_a_metric_without_a_model_passes_the_config_check_and_its_jobs_ask_for_no_gpu(
    local_plugin, tiny_config, paper_config
):
    tiny_config["evaluation"]["metrics"]["colours"] = model_free()
    validate_config(tiny_config)
    metrics = paper_config["evaluation"]["metrics"]
    metrics |= {"colours": model_free(), "colours-gpu": model_free(resources={"gpus": 2, "weights_gb": 3.0})}
    settings = paper_config["job_resources"]
    # two batches of `evaluation.batch_size` pairs, two images each, at the largest render size (1024 x 1024)
    images_mb = 2 * paper_config["evaluation"]["batch_size"] * 2 * 1024 * 1024 * settings["bytes_per_pixel"] / 2**20
    assert score_job(paper_config, "clipscore")["gpus"] == 1  # its model's
    # no `throughput:` entry for them: a model job's default time
    assert score_job(paper_config, "colours") == {
        "gpus": 0,
        "threads": settings["cpu_threads"],
        "mem_mb": math.ceil(settings["base_mb"] + images_mb),
        "runtime": settings["runtime_default"],
    }
    assert score_job(paper_config, "colours-gpu") == {
        "gpus": 2,
        "threads": 2 * settings["threads_per_gpu"],
        "mem_mb": math.ceil(settings["base_mb"] + 3 * 1024 + images_mb),
        "runtime": settings["runtime_default"],
    }
    assert job_env(paper_config, "score_metric", {"metric": "colours"}) == "vlm"


@pytest.mark.integration
def test_the_plan_of_an_evaluation_with_model_free_metrics_asks_for_what_they_declare(
    local_plugin, gpu_plugin, tiny_config, exported, tmp_path
):
    """`blindspot plan`'s jobs (Snakemake's DAG, as the rules size them) of `evaluate`'s config: the plain
    class's score jobs ask for no GPU and load no model; the class that declares a GPU gets it."""
    config = protobias_config(tiny_config, str(exported[1]), [PLUGIN, gpu_plugin], {}, str(tmp_path / "out"))
    validate_config(config)
    jobs = job_table(config)
    scores = jobs[jobs["rule"] == "score_metric"].groupby("model")
    assert scores["gpus"].unique().to_dict() == {"colourshare": [0], "gpucolours": [1]}
    assert set(jobs.loc[jobs["rule"] == "score_metric", "models"]) == {"colourshare", "gpucolours"}
    assert "build_model" not in set(jobs["rule"])  # nothing to build: no registry model is loaded


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            model_free(resources={"gpus": 1, "memory": 2}),
            r"colours\.resources\.memory': Additional properties are not allowed",
        ),
        (
            model_free(model="tiny-clip", resources={"gpus": 1}),
            r"colours\.resources': only for a metric without `model`; its model's registry entry \('tiny-clip'\)",
        ),
        (
            {"plugin": "clip_similarity", "label": "CLIP", "family": "embedding"},
            r"colours\.model': missing; clip_similarity loads a registry model",
        ),
    ],
)
def test_resources_go_with_no_model_and_a_built_in_plug_in_needs_its_model(local_plugin, entry, message, tiny_config):
    tiny_config["evaluation"]["metrics"]["colours"] = entry
    with pytest.raises(ConfigError, match=rf"^config key 'evaluation\.metrics\.{message}") as error:
        validate_config(tiny_config)
    assert "\n" not in str(error.value)


def test_a_model_free_metrics_identity_has_no_model_part(local_plugin, tiny_config):
    entry = model_free()
    settings = metric_score_settings(tiny_config["models"], entry)
    assert settings == {}
    identity = metric_identity(entry, None, settings, plugin_code(PLUGIN))
    assert (identity["model_id"], identity["revision"]) == ("", "")
    assert json.loads(identity["version"])["plugin_code"]["module"] == LOCAL_MODULE


@pytest.fixture
def gpu_plugin(local_plugin):
    """A model-free plug-in whose class declares the GPU and weights its jobs need."""
    (local_plugin / "gpu_colours.py").write_text(
        f"from {LOCAL_MODULE} import ColourShare\n\n\nclass GPUColours(ColourShare):\n"
        '    resources = {"gpus": 1, "weights_gb": 2.5}\n'
    )
    yield "gpu_colours:GPUColours"
    sys.modules.pop("gpu_colours", None)


def test_metric_entries_take_none_or_a_class_that_says_it_loads_no_model(local_plugin, gpu_plugin, tiny_config):
    chosen = metric_entries(tiny_config, [PLUGIN, f"{PLUGIN}@none", gpu_plugin])
    # ColourShare twice, by one name: the later entry (@none) is the same as the class's
    assert chosen == {
        "colourshare": {"plugin": PLUGIN, "label": PLUGIN, "family": "embedding"},
        "gpucolours": {
            "plugin": gpu_plugin,
            "resources": {"gpus": 1, "weights_gb": 2.5},
            "label": gpu_plugin,
            "family": "embedding",
        },
    }
    assert metric_entries(tiny_config, [f"{PLUGIN}@none"])["colourshare"] == chosen["colourshare"]
    # @none reads nothing of the plug-in: a module that is not there yet is fine until its job
    assert "model" not in metric_entries(tiny_config, ["not_here:Metric@none"])["metric"]
    (local_plugin / "modelled.py").write_text("class Scorer:\n    pass\n")
    with pytest.raises(ConfigError) as error:
        metric_entries(tiny_config, ["modelled:Scorer"])
    assert str(error.value) == (
        "--metric modelled:Scorer: name the plug-in's model as modelled:Scorer@MODEL (a registry name), or "
        "modelled:Scorer@none if it loads none; its class does not say `registry_model = False`"
    )
    with pytest.raises(
        ConfigError,
        match=r"^--metric not_here:Metric: name the plug-in's model as .*@none if it "
        r"loads none \('not_here:Metric': cannot import module 'not_here'",
    ):
        metric_entries(tiny_config, ["not_here:Metric"])


def colour_scorer(metric: str):
    import blindspot.api

    return blindspot.api.Scorer(metric)


@pytest.mark.parametrize("metric", [PLUGIN, f"{PLUGIN}@none"])
def test_a_model_free_plug_in_scores_in_memory(local_plugin, metric, tmp_path):
    score = colour_scorer(metric)
    assert (score.name, score.metric.model_id) == ("colourshare", "")
    solid(BLUE).save(tmp_path / "blue.png")
    table = score(["a red apple", "a red apple", "an apple"], [solid(RED), tmp_path / "blue.png", solid(RED)])
    assert list(table.columns) == ["prompt", "raw", "score", "detail"]
    assert table["raw"].tolist()[:2] == [1.0, 0.0]
    assert table["score"].tolist()[:2] == [1.0, 0.0]
    assert math.isnan(table["raw"].iloc[2])
    assert table["detail"].iloc[2] == "the prompt names no colour"


def test_in_memory_scoring_refuses_unpaired_or_unreadable_input_in_one_line(local_plugin, tmp_path):
    score = colour_scorer(PLUGIN)
    with pytest.raises(ValueError, match=r"^colourshare: 2 prompts for 1 images$"):
        score(["a", "b"], [solid(RED)])
    with pytest.raises(TypeError, match=r"^colourshare: an image is a int, not a PIL image or a path$"):
        score(["a"], [3])
    with pytest.raises(OSError, match=f"^cannot read image {tmp_path / 'missing.png'}: "):
        score(["a"], [tmp_path / "missing.png"])
    with pytest.raises(ConfigError, match=r"^--metric nosuchmetric: not a metric of the config"):
        colour_scorer("nosuchmetric")


def test_a_metric_that_needs_what_only_a_job_has_is_refused_in_one_line_before_it_loads(monkeypatch, tmp_path):
    """An API judge without its key (a job would skip it); ProtoScore before the workflow trained it."""
    import blindspot.api

    monkeypatch.delenv("BLINDSPOT_TINY_API_KEY", raising=False)
    with pytest.raises(ConfigError) as error:
        blindspot.api.Scorer("api-judge")
    assert str(error.value) == (
        "metric api-judge: its model 'local-api-judge' reads its API key from $BLINDSPOT_TINY_API_KEY, which is not set"
    )
    config = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text()) | {"results_dir": str(tmp_path / "results")}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(
        ConfigError,
        match=r"^metric protoscore: scores with the output of the workflow's train_protoscore, "
        f"{tmp_path}/results/protoscore/trained, which is not there: run the workflow's "
        "train_protoscore first$",
    ):
        blindspot.api.Scorer("protoscore", configfile=str(tmp_path / "config.yaml"))


@pytest.mark.slow  # runs the tiny CLIP, in memory and as a job
def test_in_memory_scores_equal_the_score_metric_jobs(tiny_config, tmp_path):
    """The tiny CLIP (random weights) through `blindspot.api.Scorer` and through the workflow's `score_metric` job
    on the same prompt and images. Not CLIPScore itself: its cosines are all below 0, floored to 0."""
    import blindspot.api

    results = tmp_path / "results"
    tiny_config["results_dir"] = str(results)
    tiny_config["evaluation"]["metrics"] = {
        "clip-cosine": {
            "plugin": "clip_similarity",
            "model": "tiny-clip",
            "label": "CLIP cosine",
            "family": "embedding",
            "args": {"weight": 2.5},
        },
    }
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(tiny_config))
    domain = next(iter(tiny_config["domains"]))
    write_benchmark_inputs(results, domain, tiny_config["seed"], tiny_config["benchmark"]["test_fraction"])
    subprocess.run(
        [
            sys.executable,
            "-m",
            "blindspot.steps",
            "run",
            "score_metric",
            "--configfile",
            str(configfile),
            f"domain={domain}",
            "metric=clip-cosine",
            "shard=00000",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=600,
    )
    job = read_table(results / domain / "metric_scores" / "clip-cosine" / "00000.parquet", schemas.METRIC_SCORES)
    score = blindspot.api.Scorer("clip-cosine", configfile=str(configfile))
    images = [results / domain / "corr.png", solid(BLUE)]  # a path, and the adversarial image in memory
    table = score(["a red apple"] * 2, images)
    assert table["raw"].tolist() == pytest.approx([job["corr_raw"][0], job["adv_raw"][0]], rel=1e-6, abs=1e-7)
    assert table["score"].tolist() == pytest.approx([job["corr_score"][0], job["adv_score"][0]], rel=1e-6)
    assert job["corr_raw"][0] != job["adv_raw"][0]


def usage_block() -> str:
    """docs/usage.md's example of scoring images in memory."""
    section = USAGE.split("**Scoring images in memory.**", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "docs/usage.md shows no in-memory scoring example"
    return found[1]


@pytest.mark.slow  # runs the tiny CLIP in a fresh Python
def test_the_usage_pages_in_memory_example_runs_as_written(tmp_path):
    """The example as a notebook runs it: a fresh Python, in a folder of its own, on config/tiny.yaml's clipscore."""
    shown = subprocess.run(
        [sys.executable, "-c", usage_block()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | {"PYTHONPATH": str(REPO / "src")},
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["prompt", "raw", "score"]
    assert [line.split()[1:4] for line in lines[1:]] == [["a", "red", "apple"]] * 2


@pytest.mark.slow
@pytest.mark.integration
def test_evaluate_scores_a_class_that_loads_no_model_without_at_model(local_plugin, colour_exported, tmp_path):
    """`blindspot evaluate protobias --metric module:Class`, no `@`: its class says it loads no registry model,
    and the workflow runs its jobs with none and records no model for it."""
    benchmark, dataset = colour_exported
    test = benchmark[benchmark["split"] == "test"]
    results = tmp_path / "evaluated"
    path = os.pathsep.join([str(local_plugin), os.environ.get("PYTHONPATH", "")])
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "blindspot.cli",
            "evaluate",
            "protobias",
            "--dataset",
            str(dataset),
            "--metric",
            PLUGIN,
            "--results-dir",
            str(results),
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": path},
        timeout=1200,
    ).stdout
    assert PLUGIN in shown
    table = pd.read_csv(results / "tables" / "table3_metrics.csv").set_index("Method")
    assert table.loc[PLUGIN, "Overall Acc."] == pytest.approx(test["right"].sum() / len(test))
    entry = yaml.safe_load((results / "evaluate_config.yaml").read_text())["evaluation"]["metrics"]["colourshare"]
    assert entry == {"plugin": PLUGIN, "label": PLUGIN, "family": "embedding"}
    about = json.loads((results / "tables" / "evaluate_protobias.json").read_text())
    assert about["metrics"]["colourshare"] == {"plugin": PLUGIN, "args": {}}
    scores = pd.concat(read_table(file, schemas.METRIC_SCORES) for file in results.glob("*/metric_scores/*/*.parquet"))
    assert set(scores["model_id"]) == {""}
    job = json.loads(next(results.glob("logs/score_metric/**/*.job.json")).read_text())
    assert job["arguments"]["model"] is None
