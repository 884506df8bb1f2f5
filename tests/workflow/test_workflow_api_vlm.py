"""The tiny preset with an API VLM of the proprietary group, served by a real OpenAI-compatible server on
127.0.0.1: it answers the Original setting only, as the paper's proprietary models, and the tables that
average across settings are over the models that answered every setting (docs/fidelity.md H10). Goes on
from the tiny run (after tests/workflow/test_workflow.py, which reads its tables as the preset makes them)."""

import copy

import pandas as pd
import pytest
import yaml
from helpers.api_server import KEY, KEY_ENV, _letter_bias, serving
from helpers.workflow import snakemake

API_VLM = "served-vlm"


@pytest.mark.integration
def test_an_api_vlm_answers_the_original_setting_and_the_averages_leave_it_out(
    tiny_run, run_config, tmp_path, monkeypatch
):
    work, _ = tiny_run
    results = work / run_config["results_dir"]
    served = work / run_config["resources_dir"] / "models" / "tiny-qwen2.5-vl"
    config = copy.deepcopy(run_config)
    humble = config["humblebench"]
    monkeypatch.setenv(KEY_ENV, KEY)
    with serving(str(served), tmp_path) as server:
        config["models"][API_VLM] = {
            "id": str(served),
            "backend": "openai_api",
            "endpoint": f"http://127.0.0.1:{server['port']}/v1",
            "api_key_env": KEY_ENV,
            # a letter from the random model (noise, but real), greedily
            "request": {"max_tokens": 1, "temperature": 0, "logit_bias": _letter_bias(str(served))},
            "prices": {"input_per_million": 0, "output_per_million": 0, "read": "2026-01-01", "source": "local"},
            "gpus": 0,
            "group": "proprietary",
        }
        humble["vlms"] = [*humble["vlms"], API_VLM]
        (work / "api_vlm.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        snakemake(
            "--profile",
            "profiles/local",
            "-c2",
            "--configfile",
            "api_vlm.yaml",
            "--until",
            "make_humble_tables",
            cwd=work,
        )
    answers = pd.concat(
        pd.read_parquet(path) for path in (results / "humblebench" / "answers" / API_VLM).glob("*.parquet")
    )
    assert set(answers["setting"]) == {"original"}  # the proprietary group's one setting
    open_models = [vlm for vlm in humble["vlms"] if vlm != API_VLM]
    tables = results / "tables"
    table4 = pd.read_csv(tables / "table4_humblebench_original.csv", keep_default_na=False)
    assert API_VLM in set(table4["Model"])  # the Original setting: every model
    table5 = pd.read_csv(tables / "table5_humblebench_settings.csv")
    assert set(table5["# Models"]) == {len(open_models)}  # every row, the stress ones too, over the open models
    caption = (tables / "table5_humblebench_settings.md").read_text().splitlines()[0]
    assert (
        f"over the {len(open_models)} models that answered every setting (left out, answering fewer: {API_VLM})"
        in caption
    )
    table6 = pd.read_csv(tables / "table6_humblebench_models.csv", keep_default_na=False)
    assert API_VLM not in set(table6["Model"])
    appendix = pd.read_csv(tables / "tableA1_humblebench_cautious.csv")
    assert list(appendix["Model"]) == [*open_models, "Average"]
