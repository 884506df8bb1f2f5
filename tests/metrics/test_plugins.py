"""Metric plug-ins from outside the package: a module on the path named as `module:Class`, and an
installed package's entry point. The plug-in and its pyproject.toml are the ones docs/metrics.md shows."""

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.plugins import BLUE, LOCAL_MODULE, RED, docs_file, solid, write_benchmark_inputs
from helpers.workflow import REPO

from blindspot import schemas, targets
from blindspot.checks import validate_config
from blindspot.config import ConfigError
from blindspot.io import read_table
from blindspot.models.spec import model_spec
from blindspot.plugins import (
    PLUGINS,
    PluginError,
    TrainedBy,
    check_plugin,
    load_metric,
    plugin_code,
    trained_by,
    trained_metric_input,
)
from blindspot.protobias.metric_scores import metric_identity, metric_score_settings
from blindspot.protobias.released import check_released_config


@pytest.fixture(scope="module")
def installed_folder(tmp_path_factory) -> Path:
    """The example plug-in built as a package and installed (with its .dist-info) into a folder of
    its own, which is all entry points need: .venv is left as it is."""
    source = tmp_path_factory.mktemp("colour-share")
    (source / "colour_share.py").write_text(docs_file("colour_share.py"))
    (source / "pyproject.toml").write_text(docs_file("pyproject.toml"))
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return target


@pytest.fixture
def installed_plugin(installed_folder, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(installed_folder))
    monkeypatch.delitem(sys.modules, "colour_share", raising=False)
    yield installed_folder
    sys.modules.pop("colour_share", None)


def scores_of(plugin: str, tiny_config) -> list[float]:
    metric = load_metric(plugin, model_spec(tiny_config, "tiny-clip"), 2, "unused", size=8)
    assert metric.bounds == (0.0, 1.0)
    scores = metric.score(["a red apple", "a red apple", "a blue car", "an apple"], [solid(RED), solid(BLUE)] * 2)
    return [score.raw for score in scores]


def test_a_module_on_the_path_is_a_plugin_as_module_colon_class(local_plugin, tiny_config):
    check_plugin(f"{LOCAL_MODULE}:ColourShare")
    raw = scores_of(f"{LOCAL_MODULE}:ColourShare", tiny_config)
    assert raw[:3] == [1.0, 0.0, 0.0]
    assert raw[3] != raw[3]  # a prompt that names no colour: NaN


def test_an_installed_packages_entry_point_is_a_plugin_by_its_name(installed_plugin, tiny_config):
    check_plugin("colour_share")
    assert scores_of("colour_share", tiny_config)[:3] == [1.0, 0.0, 0.0]
    assert str(installed_plugin) in sys.modules["colour_share"].__file__


def identity_of(plugin: str, tiny_config) -> dict[str, str]:
    entry = {"plugin": plugin, "model": "tiny-clip", "args": {}}
    settings = metric_score_settings(tiny_config["models"], entry)
    return metric_identity(entry, model_spec(tiny_config, "tiny-clip"), settings, plugin_code(plugin))


def test_an_outside_plugins_identity_holds_its_module_and_version(installed_plugin, local_plugin, tiny_config):
    assert (
        '"plugin_code": {"module": "colour_share", "version": "colour-share 0.1.0"}'
        in (identity_of("colour_share", tiny_config)["version"])
    )
    local = identity_of(f"{LOCAL_MODULE}:ColourShare", tiny_config)["version"]
    assert f'"module": "{LOCAL_MODULE}", "version": "sha256:' in local
    # New source is another metric to the cache.
    (local_plugin / f"{LOCAL_MODULE}.py").write_text(docs_file("colour_share.py") + "\n# changed\n")
    assert identity_of(f"{LOCAL_MODULE}:ColourShare", tiny_config)["version"] != local


def test_every_built_in_plugin_has_a_score_version(monkeypatch):
    """A built-in plug-in's code is known by its module's SCORE_VERSION; a module without one stops the
    DAG in one line naming it."""
    for plugin, target in PLUGINS.items():
        code = plugin_code(plugin)
        assert code["module"] == target.split(":")[0]
        assert re.fullmatch(r"SCORE_VERSION \d+", code["version"]), plugin
    monkeypatch.delattr(sys.modules["blindspot.metrics.hpsv2"], "SCORE_VERSION")
    with pytest.raises(
        PluginError, match=r"^'hpsv2': module 'blindspot.metrics.hpsv2' has no SCORE_VERSION \(an int\)$"
    ):
        plugin_code("hpsv2")


@pytest.mark.parametrize("plugin", ["protoscore", "blindspot.metrics.protoscore:ProtoScore"])
def test_a_trained_plugin_is_known_by_its_declaration_not_its_name(plugin, tiny_config):
    """ProtoScore declares what trains it (`TRAINED_BY`), named either way: the rules hand it that output,
    the config must train it on the metric's model, and a released dataset (nothing built) cannot have it."""
    tiny_config["evaluation"]["metrics"]["protoscore"]["plugin"] = plugin
    assert trained_by(plugin) == TrainedBy("train_protoscore", "protoscore", "protoscore.model")
    assert trained_by("clip_similarity") is None
    assert trained_metric_input(tiny_config, "protoscore") == [targets.path(tiny_config, "protoscore")]
    assert trained_metric_input(tiny_config, "clipscore") == []
    validate_config(copy.deepcopy(tiny_config))
    other = copy.deepcopy(tiny_config)
    other["protoscore"]["model"] = "tiny-qwen2.5-vl"
    with pytest.raises(ConfigError, match=r"^config key 'evaluation.metrics.protoscore.model': 'tiny-qwen3-vl' "):
        validate_config(other)
    tiny_config["dataset"] = {"path": "pairs.csv"}
    tiny_config["humblebench"]["from_benchmark"] = None
    with pytest.raises(ConfigError, match=r"^dataset: metric protoscore scores with train_protoscore's output"):
        check_released_config(tiny_config)


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        ("no_such_plugin", "'no_such_plugin' is no built-in plug-in (clip_similarity, "),
        ("no_such_module:Metric", "'no_such_module:Metric': module 'no_such_module' is not importable"),
        ("no_such_package.scorer:Metric", "'no_such_package.scorer:Metric': cannot import module 'no_such_package"),
        ("colour_share:Colour Share", "'colour_share:Colour Share' is not of the form module:Class"),
    ],
)
def test_a_plugin_that_cannot_be_found_is_a_one_line_config_error(plugin, message, tiny_config):
    tiny_config["evaluation"]["metrics"]["clipscore"]["plugin"] = plugin
    with pytest.raises(ConfigError) as error:
        validate_config(tiny_config)
    assert str(error.value).startswith(f"config key 'evaluation.metrics.clipscore.plugin': {message}")
    assert "\n" not in str(error.value)


def test_a_plugin_without_its_class_stops_its_job_in_one_line(local_plugin, tiny_config):
    check_plugin(f"{LOCAL_MODULE}:NoSuchClass")  # the config check does not import the module
    with pytest.raises(
        PluginError, match=f"^'{LOCAL_MODULE}:NoSuchClass': module '{LOCAL_MODULE}' has no 'NoSuchClass'$"
    ):
        load_metric(f"{LOCAL_MODULE}:NoSuchClass", model_spec(tiny_config, "tiny-clip"), 2, "unused")


# slow: a job in a fresh Python process (seconds of imports), kept out of the fast tier's 5 minutes
@pytest.mark.slow
def test_outside_plugins_are_scored_by_the_workflows_step(local_plugin, installed_plugin, tiny_config, tmp_path):
    """`python -m blindspot.steps run score_metric` (the job as the workflow runs it) with a config whose
    metrics are the example plug-in as `module:Class` and as an installed entry point."""
    results = tmp_path / "results"
    tiny_config["results_dir"] = str(results)
    entry = {"model": "tiny-clip", "family": "embedding", "args": {"size": 8}}
    tiny_config["evaluation"]["metrics"] = {
        "colours-module": entry | {"plugin": f"{LOCAL_MODULE}:ColourShare", "label": "Colour share (module)"},
        "colours-entry-point": entry | {"plugin": "colour_share", "label": "Colour share (entry point)"},
    }
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(tiny_config))
    domain = next(iter(tiny_config["domains"]))
    write_benchmark_inputs(results, domain, tiny_config["seed"], tiny_config["benchmark"]["test_fraction"])
    path = os.pathsep.join([str(local_plugin), str(installed_plugin), os.environ.get("PYTHONPATH", "")])
    for metric in tiny_config["evaluation"]["metrics"]:
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
                f"metric={metric}",
                "shard=00000",
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
            env=os.environ | {"PYTHONPATH": path},
        )
        scores = read_table(results / domain / "metric_scores" / metric / "00000.parquet", schemas.METRIC_SCORES)
        assert scores[["pair_id", "metric", "corr_raw", "adv_raw"]].to_dict("records") == [
            {"pair_id": "p0", "metric": metric, "corr_raw": 1.0, "adv_raw": 0.0}
        ]


@pytest.mark.slow
@pytest.mark.integration
def test_outside_plugins_are_scored_by_evaluate(local_plugin, installed_plugin, colour_exported, tmp_path):
    """`blindspot evaluate protobias` with the example plug-in as `module:Class@MODEL` and as an entry point's
    name: its rows are in the table it prints and writes, with the accuracy the images were made to give."""
    benchmark, dataset = colour_exported
    test = benchmark[benchmark["split"] == "test"]
    expected = test["right"].sum() / len(test)  # only the test split is evaluated
    assert 0 < expected < 1  # right and wrong pairs both among the test pairs
    results = tmp_path / "evaluated"
    path = os.pathsep.join([str(local_plugin), str(installed_plugin), os.environ.get("PYTHONPATH", "")])
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
            f"{LOCAL_MODULE}:ColourShare@tiny-clip",
            "--metric",
            "colour_share@tiny-clip",
            "--results-dir",
            str(results),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": path},
    ).stdout
    table = pd.read_csv(results / "tables" / "table3_metrics.csv").set_index("Method")
    for label in (f"{LOCAL_MODULE}:ColourShare", "colour_share"):
        assert label in shown
        assert table.loc[label, "Overall Acc."] == pytest.approx(expected)


def test_importing_one_plugin_runs_no_registry_and_imports_no_other_plugin():
    """The registry lives in `blindspot.plugins`; the `blindspot.metrics` package is plug-ins only, so one
    plug-in's import brings in no other and no model library."""
    script = (
        "import sys, blindspot.metrics, blindspot.metrics.clip_similarity\n"
        "print(sorted(name for name in vars(blindspot.metrics) if not name.startswith('__')))\n"
        "print(sorted(m for m in sys.modules if m.startswith('blindspot.metrics.')))\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    names, plugins, torch_loaded = done.stdout.splitlines()
    assert names == "['clip_similarity']"  # the submodule just imported, nothing the package defines
    assert plugins == "['blindspot.metrics.clip_similarity']"
    assert torch_loaded == "False"
