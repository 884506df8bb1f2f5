import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.workflow import REPO, SNAKEMAKE

from blindspot.checks import check_files, load_config, validate_config
from blindspot.config import ConfigError, read_yaml
from blindspot.models.spec import model_spec
from blindspot.shards import n_shards, shard_names, shard_slice


def test_paper_and_tiny_configs_are_valid(paper_config, tiny_config):
    validate_config(paper_config)
    validate_config(tiny_config)


def test_paper_config_names_the_papers_models(paper_config):
    stage = paper_config["prompt_stage"]
    ids = {name: paper_config["models"][name]["id"] for name in stage["generators"] + stage["judges"]}
    assert sorted(ids.values()) == sorted(
        [
            "Qwen/Qwen2.5-14B-Instruct",
            "google/gemma-3-12b-it",
            "meta-llama/Llama-3.1-8B-Instruct",
            "Qwen/Qwen2.5-32B-Instruct",
            "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        ]
    )
    assert set(paper_config["domains"]) == {"animals", "demography", "objects"}


def test_a_job_stopped_by_bad_input_says_why_in_one_line(tmp_path):
    taxonomy = tmp_path / "animals.yaml"
    text = (REPO / "config" / "taxonomy" / "animals.yaml").read_text()
    taxonomy.write_text(text.replace("    label: bird\n", "    label: bird\n    label: fowl\n", 1))
    from helpers.workflow import step_command

    # The job as Snakemake ran it (the config check, which loads every taxonomy, is behind it).
    job = step_command(
        tmp_path,
        "make_seeds",
        taxonomy=str(taxonomy),
        domain="animals",
        n_seeds=8,
        seed=1,
        out=str(tmp_path / "seeds.parquet"),
    )
    done = subprocess.run([sys.executable, *job], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    line = line_of(taxonomy, "label: fowl")
    twice = f"key 'subcategories.birds.label' is given twice (first on line {line - 1})"
    assert done.stderr.strip().splitlines()[-1] == f"taxonomy file {taxonomy} line {line}: {twice}"
    # Run by hand from a config naming it, the job stops at the config check, with the same line.
    path = tiny_with(tmp_path, "taxonomy: config/taxonomy/animals.yaml", f"taxonomy: {taxonomy}")
    done = subprocess.run(
        [sys.executable, "-m", "blindspot.steps", "run", "make_seeds", "--configfile", str(path), "domain=animals"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == f"taxonomy file {taxonomy} line {line}: {twice}"
    bad_wildcard = [sys.executable, "-m", "blindspot.steps", "run", "make_seeds", "animals", "--configfile", str(path)]
    done = subprocess.run(bad_wildcard, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("wildcards are NAME=VALUE, not animals")


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda c: c.update(shard_sise=3), "shard_sise"),
        (lambda c: c["prompt_stage"].update(generatorz=[]), "prompt_stage.generatorz"),
        (lambda c: c["models"]["qwen2.5-14b-instruct"].update(gpus=-1), "models.qwen2.5-14b-instruct.gpus"),
        (lambda c: c["models"]["gemma-3-12b-it"].update(backend="tensorrt"), "models.gemma-3-12b-it.backend"),
        (lambda c: c["domains"]["animals"].pop("n_seeds"), "domains.animals.n_seeds"),
        (lambda c: c["domains"]["animals"].update(n_seeds="many"), "domains.animals.n_seeds"),
        (lambda c: c.pop("shard_size"), "shard_size"),
        (lambda c: c["prompt_stage"]["judges"].append("gpt-7"), "prompt_stage.judges"),
        (lambda c: c["prompt_stage"].update(nli_model="qwen2.5-14b-instruct"), "models.qwen2.5-14b-instruct.backend"),
        (lambda c: c["protoscore"].update(model="qwen2.5-vl-7b-instruct"), "evaluation.metrics.protoscore.model"),
        (lambda c: c["models"]["gpt-5"]["prices"].update(image_tokens=1.5), "models.gpt-5.prices.image_tokens"),
        (lambda c: c["models"]["gpt-5"]["prices"].update(read="August"), "models.gpt-5.prices.read"),
        (lambda c: c["models"]["gpt-5"]["prices"].pop("source"), "models.gpt-5.prices.source"),
        (lambda c: c["models"]["gpt-5"]["prices"].update(per_token=1), "models.gpt-5.prices.per_token"),
        (lambda c: c.update(budget=-5), "budget"),
    ],
)
def test_a_bad_key_stops_with_a_message_naming_it(paper_config, edit, key):
    edit(paper_config)
    with pytest.raises(ConfigError, match=f"'{key}'"):
        validate_config(paper_config)


@pytest.mark.parametrize(
    ("part", "arg", "message"),
    [
        ("args", "wieght", "clip_similarity takes no argument 'wieght' (it takes weight, floor_at_zero, processor)"),
        ("models", "captionr", "clip_similarity takes no argument 'captionr'"),
    ],
)
def test_a_misspelt_metric_argument_is_refused_before_any_job(paper_config, part, arg, message):
    """A built-in plug-in's arguments are its builder's: a misspelt one used to be a TypeError in the
    scoring job, after its model had loaded."""
    paper_config["evaluation"]["metrics"]["clipscore"].setdefault(part, {})[arg] = (
        "qwen2.5-vl-7b-instruct" if part == "models" else 2.5
    )
    with pytest.raises(
        ConfigError, match=rf"^config key 'evaluation\.metrics\.clipscore\.{part}\.{arg}': {re.escape(message)}"
    ):
        validate_config(paper_config)


def test_a_metrics_helpers_are_api_models_exactly_when_its_own_model_is_one(tiny_config):
    """A metric's helpers load in its job, which runs where its own model does: an API helper of a GPU
    metric would be called from a compute node without the network, a GPU helper of an API metric would
    load on the submit host, in both cases after the job had loaded its own model."""
    metric = tiny_config["evaluation"]["metrics"]["alignscore"]
    metric["models"]["captioner"] = "local-api-judge"
    with pytest.raises(ConfigError) as error:
        validate_config(tiny_config)
    assert str(error.value) == (
        "config key 'evaluation.metrics.alignscore.models.captioner': 'local-api-judge' is an API model, but the "
        "metric's jobs run on compute nodes, without the network, where its own model 'tiny-alignscore' does"
    )
    metric["models"]["captioner"], metric["model"] = "tiny-qwen2.5-vl", "local-api-judge"
    with pytest.raises(ConfigError) as error:
        validate_config(tiny_config)
    assert str(error.value) == (
        "config key 'evaluation.metrics.alignscore.models.captioner': 'tiny-qwen2.5-vl' is no API model, but the "
        "metric's jobs run on the submit host, without GPUs, where its own model 'local-api-judge' does"
    )
    metric["models"]["captioner"] = "local-api-judge"
    validate_config(tiny_config)


def test_what_decides_a_models_outputs_leaves_out_where_and_how_fast_it_runs(paper_config, tiny_config):
    """The journals of a killed job and the score cache key on `outputs`: raising the memory share, the GPUs
    or the memory estimate after an out-of-memory error goes on from them; a quantization does not."""
    entry = paper_config["models"]["qwen2.5-vl-7b-instruct"]
    before = model_spec(paper_config, "qwen2.5-vl-7b-instruct").outputs
    assert before["path"] == entry["id"]
    assert "gpus" not in before
    assert "engine_args" not in before  # its limit_mm_per_prompt is how many images a prompt may hold
    entry |= {"gpus": entry["gpus"] + 1, "weights_gb": 99.0, "max_model_len": 4096}
    entry["engine_args"] = entry.get("engine_args", {}) | {"gpu_memory_utilization": 0.8, "max_num_seqs": 8}
    assert model_spec(paper_config, "qwen2.5-vl-7b-instruct").outputs == before
    entry["engine_args"]["quantization"] = "fp8"
    assert model_spec(paper_config, "qwen2.5-vl-7b-instruct").outputs == before | {
        "engine_args": {"quantization": "fp8"}
    }
    entry["dtype"] = "float16"
    assert model_spec(paper_config, "qwen2.5-vl-7b-instruct").outputs["dtype"] == "float16"
    # A built model's id is its registry name: its recipe says which weights it has.
    assert model_spec(tiny_config, "tiny-clip").outputs["build"] == tiny_config["models"]["tiny-clip"]["build"]


def test_registry_gives_gpus_path_and_provenance(paper_config, tiny_config):
    judge = model_spec(paper_config, "qwen2.5-32b-instruct")
    assert (judge.gpus, judge.path, judge.model_id, judge.built) == (2, "Qwen/Qwen2.5-32B-Instruct", judge.path, False)
    built = model_spec(tiny_config, "tiny-qwen2")
    assert built.built
    assert built.path == "resources/models/tiny-qwen2"
    assert built.model_id == "built:tiny-qwen2"
    with pytest.raises(ConfigError, match="not in the registry"):
        model_spec(tiny_config, "nope")


def test_shards_cover_every_row_once():
    assert n_shards(10, 4) == 3
    assert shard_names(10, 4) == ["00000", "00001", "00002"]
    rows = list(range(10))
    covered = [row for shard in shard_names(10, 4) for row in rows[shard_slice(shard, 4)]]
    assert covered == rows


# A GPU job without its GPUs. `judge_images` loads its VLM before it reads anything, so the job needs
# no inputs: it stops at the model, or (allowed to use the CPU) goes on to fail on the missing renders.
def gpu_job(tmp_path, config: dict, asks: int, visible: str | None):
    """Run `judge_images` as a job would (`python -m blindspot.steps replay`), its VLM asking for `asks`
    GPUs, with CUDA_VISIBLE_DEVICES set to `visible` (None: unset)."""
    import os
    import subprocess
    import sys

    from helpers.workflow import spec_of, step_command

    config["models"]["tiny-qwen2.5-vl"]["gpus"] = asks
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    command = step_command(
        tmp_path,
        "judge_images",
        domain="animals",
        t2i="tiny-flux",
        vlm="tiny-qwen2.5-vl",
        shard="00000",
        renders=str(tmp_path / "renders.parquet"),
        earlier=[],
        template="config/prompts/judge_image_v1.yaml",
        out=str(tmp_path / "scores.parquet"),
        counters_out=str(tmp_path / "counters.json"),
        model=spec_of(config, "tiny-qwen2.5-vl"),
        # the first filter VLM: it reads no earlier VLM's scores
        earlier_vlms=[],
        threshold=None,
        score=None,
        validation_pool=None,
        seed=None,
        batch_size=config["image_stage"]["judge_batch_size"],
        journal=str(tmp_path / "scores.journal.jsonl"),
    )
    repo = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, *command], cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def shortage_line(asks: int, seen: int, visible: str) -> str:
    import torch

    from blindspot.models.device import nvidia_driver

    return (
        f"rule judge_images: model 'tiny-qwen2.5-vl' asks for {asks} GPU(s), the job sees {seen} "
        f"(CUDA_VISIBLE_DEVICES={visible}; torch {torch.__version__} built for CUDA {torch.version.cuda or 'none'}, "
        f"{nvidia_driver()}); run it where its GPUs are, or set allow_cpu: true in the config to run GPU models on "
        "the CPU"
    )


def test_the_driver_is_named_or_its_absence_said():
    import shutil

    from blindspot.models.device import nvidia_driver

    driver = nvidia_driver()
    if shutil.which("nvidia-smi") is None:
        assert driver == "no driver"
    else:
        assert driver.startswith(("driver ", "no driver (nvidia-smi: "))


# slow: a job in a fresh Python process (seconds of imports), kept out of the fast tier's 5 minutes
@pytest.mark.slow
def test_a_job_that_sees_no_gpu_stops_with_one_line_naming_rule_gpus_and_versions(tiny_config, tmp_path):
    del tiny_config["allow_cpu"]  # as in the paper's config
    done = gpu_job(tmp_path, tiny_config, asks=1, visible="")  # an empty list hides every GPU, on any machine
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == shortage_line(1, 0, "''")
    assert "Traceback" not in done.stderr


# slow: a job in a fresh Python process (seconds of imports), kept out of the fast tier's 5 minutes
@pytest.mark.slow
def test_a_job_given_fewer_gpus_than_its_model_asks_for_stops(tiny_config, tmp_path):
    """CUDA_VISIBLE_DEVICES names two GPUs, as SLURM sets it on the test cluster's fake ones; torch sees
    what is really there (none on a CPU host, no more than two elsewhere), fewer than the four asked for."""
    import torch

    seen = min(torch.cuda.device_count(), 2) if torch.cuda.is_available() else 0
    tiny_config["allow_cpu"] = False
    done = gpu_job(tmp_path, tiny_config, asks=4, visible="0,1")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == shortage_line(4, seen, "'0,1'")


@pytest.mark.slow
def test_allow_cpu_lets_the_job_run_its_gpu_model_on_the_cpu(built_config, tmp_path):
    assert built_config["allow_cpu"] is True  # the tiny preset
    done = gpu_job(tmp_path, copy.deepcopy(built_config), asks=1, visible="")
    # the job passed its GPU check and went on to stop where a job without its input does
    assert "GPU(s)" not in done.stderr
    assert "renders.parquet" in done.stderr.strip().splitlines()[-1]


@pytest.mark.gpu
@pytest.mark.skipif("not __import__('torch').cuda.is_available()", reason="needs CUDA")
def test_on_a_gpu_host_a_job_given_one_gpu_of_two_stops(tiny_config, tmp_path):
    del tiny_config["allow_cpu"]
    done = gpu_job(tmp_path, tiny_config, asks=2, visible="0")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == shortage_line(2, 1, "'0'")


def fake_gpus(monkeypatch, count: int) -> None:
    """A CPU host cannot show torch some GPUs: torch.cuda's count is replaced (the one mock of torch here)."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_gpus_are_counted_without_initialising_cuda_so_a_forked_vllm_engine_can(monkeypatch):
    """After CUDA's runtime has counted devices (`cuInit`), a forked process cannot use CUDA: vLLM forks
    its engine after the job has checked its GPUs. No GPU here to fork on; what the count asks is shown."""
    import torch

    from blindspot.models.device import visible_gpus

    def runtime_count():
        raise AssertionError("counted through the CUDA runtime, which initialises CUDA in the job's process")

    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 2)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", runtime_count, raising=False)
    assert visible_gpus() == 2
    assert not torch.cuda.is_initialized()


def test_where_a_model_runs_follows_the_gpus_it_asks_for_and_sees(tiny_config, monkeypatch):
    from blindspot.models.device import GPUUnavailable, running_step

    tiny_config["allow_cpu"] = False
    tiny_config["models"]["tiny-qwen2"]["gpus"] = 2
    spec = model_spec(tiny_config, "tiny-qwen2")
    fake_gpus(monkeypatch, 2)
    assert (spec.device, spec.device_map) == ("cuda", "auto")  # spread over its GPUs
    fake_gpus(monkeypatch, 1)
    with running_step("generate_triplets"), pytest.raises(GPUUnavailable) as error:
        spec.device_map  # noqa: B018 - the check is the point
    assert str(error.value).startswith("rule generate_triplets: model 'tiny-qwen2' asks for 2 GPU(s), the job sees 1 (")
    with pytest.raises(GPUUnavailable, match=r"^rule \(none\): "):  # outside a workflow step
        spec.device  # noqa: B018
    assert model_spec(tiny_config | {"allow_cpu": True}, "tiny-qwen2").device_map == "cpu"
    tiny_config["models"]["tiny-qwen2"]["gpus"] = 1
    assert model_spec(tiny_config, "tiny-qwen2").device_map == "cuda"
    fake_gpus(monkeypatch, 0)
    tiny_config["models"]["tiny-qwen2"]["gpus"] = 0
    assert model_spec(tiny_config, "tiny-qwen2").device_map == "cpu"  # a model that asks for none


def test_the_vllm_backend_checks_the_gpus_before_it_starts_an_engine(tiny_config, monkeypatch):
    from blindspot.models.device import GPUUnavailable
    from blindspot.models.textgen import vllm_engine

    fake_gpus(monkeypatch, 0)
    tiny_config["models"]["tiny-qwen2"].update(gpus=1, backend="vllm")
    with pytest.raises(GPUUnavailable, match="asks for 1 GPU"):  # before vllm is imported (it is not in .venv)
        vllm_engine(model_spec(tiny_config | {"allow_cpu": False}, "tiny-qwen2"))


def test_allow_cpu_is_off_unless_the_config_sets_it(paper_config, tiny_config):
    assert "allow_cpu" not in paper_config
    assert model_spec(paper_config, "qwen2.5-32b-instruct").allow_cpu is False
    assert model_spec(tiny_config, "tiny-qwen2").allow_cpu is True
    with pytest.raises(ConfigError, match="'allow_cpu'"):
        validate_config(paper_config | {"allow_cpu": "yes"})


TINY = REPO / "config" / "tiny.yaml"


def tiny_with(tmp_path, old: str, new: str) -> Path:
    """config/tiny.yaml with one line's text replaced, as a user would edit it."""
    text = TINY.read_text()
    assert text.count(old) == 1
    path = tmp_path / "config.yaml"
    path.write_text(text.replace(old, new))
    return path


def line_of(path: Path, text: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_key_given_twice_is_refused_naming_the_key_and_both_lines(tmp_path):
    path = tiny_with(tmp_path, "  judge_batch_size:", "  judge_batch_size: 2\n  judge_batch_size:")
    first = line_of(path, "judge_batch_size")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    key, again = "image_stage.judge_batch_size", first + 1
    assert str(error.value) == f"config file {path} line {again}: key '{key}' is given twice (first on line {first})"


def test_a_merge_may_override_a_key_and_a_list_may_repeat_a_value(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("base: &base {steps: 4, width: 64}\nfast: {<<: *base, steps: 1}\nnames: [a, a]\n")
    base = {"steps": 4, "width": 64}
    assert read_yaml(path) == {"base": base, "fast": base | {"steps": 1}, "names": ["a", "a"]}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("seed: [1, 2\nshard_size: 3\n", "line 2, column 11"),  # a list never closed
        ("seed: 1\n  shard_size: 3\n", "line 2, column 13"),  # indented under a scalar
        ("seed: 'open\n", "line 2, column 1"),
        ("domains:\n\t- animals\n", "line 2, column 1"),  # a tab
    ],
)
def test_yaml_that_cannot_be_read_is_one_line_naming_file_and_line(tmp_path, text, where):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert message.startswith(f"config file {path} {where}: not valid YAML (")
    assert "\n" not in message


def test_a_file_that_is_not_there_or_not_text_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=f"^config file {tmp_path / 'nope.yaml'} does not exist$"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(tmp_path / "latin1.yaml")


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda c: c["domains"]["animals"].update(taxonomy="config/taxonomy/nowhere.yaml"), "domains.animals.taxonomy"),
        (
            lambda c: c["prompt_stage"].update(generate_template="config/prompts/gone.yaml"),
            "prompt_stage.generate_template",
        ),
        (lambda c: c["image_stage"].update(judge_template="config/prompts"), "image_stage.judge_template"),
        (
            lambda c: c["humblebench"]["settings"]["cautious"].update(template="x.yaml"),
            "humblebench.settings.cautious.template",
        ),
        (
            lambda c: c["evaluation"]["metrics"]["vlm-judge"]["args"].update(template="y.yaml"),
            "evaluation.metrics.vlm-judge.args.template",
        ),
    ],
)
def test_a_missing_taxonomy_or_template_fails_the_config_check_naming_its_key(tiny_config, edit, key):
    validate_config(tiny_config)
    edit(tiny_config)
    with pytest.raises(ConfigError, match=f"^config key '{re.escape(key)}': "):
        validate_config(tiny_config)


@pytest.mark.parametrize(
    "text",
    [
        "name: j\nversion: 1\nuser: 'Score {{ description }} from 1 to 10.'\n",  # no rubric
        "name: j\nversion: 1\nrubric: 10 is perfect.\nuser: 'Score {{ description }} from 1 to 10.'\n",  # unused
    ],
)
def test_the_vlm_filter_template_needs_the_rubric_people_are_shown_and_uses_it(tiny_config, tmp_path, text):
    """The annotation projects show the filter evaluators this template's rubric: without one, or with one
    its messages ignore, people and the VLMs would score on different rubrics."""
    template = tmp_path / "judge.yaml"
    template.write_text(text)
    tiny_config["image_stage"]["judge_template"] = str(template)
    with pytest.raises(ConfigError, match=r"^config key 'image_stage\.judge_template': .* needs a `rubric`"):
        validate_config(tiny_config)
    template.write_text(
        text.replace("from 1 to 10.'", "{{ rubric }}'").replace("user:", "rubric: 10 is all.\nuser:", 1)
        if "rubric:" not in text
        else text.replace("from 1 to 10.'", "{{ rubric }}'")
    )
    validate_config(tiny_config)


def test_a_question_kind_naming_an_unknown_field_fails_the_config_check(tiny_config):
    tiny_config["humblebench"]["from_benchmark"]["kinds"]["count"]["text"] = "How many {object} are there?"
    says = r"cannot fill in 'object' \(it may use \{aux\}, \{label\}, \{subject\}\)$"
    with pytest.raises(ConfigError, match=r"^config key 'humblebench\.from_benchmark\.kinds\.count\.text': " + says):
        validate_config(tiny_config)


def test_a_broken_template_fails_the_config_check_naming_its_key_and_file(tiny_config, tmp_path):
    broken = tmp_path / "cautious.yaml"
    broken.write_text("name: humble_cautious\nversion: 2\nuser: '{{ question }'\n")
    tiny_config["humblebench"]["settings"]["cautious"]["template"] = str(broken)
    with pytest.raises(
        ConfigError,
        match=rf"^config key 'humblebench\.settings\.cautious\.template': prompt template "
        rf"{re.escape(str(broken))}: its user message, line 1",
    ):
        check_files(tiny_config)


def test_a_missing_scene_graph_file_names_its_key(tiny_config, tmp_path):
    scene_graphs = {"file": str(tmp_path / "graphs.json"), "template": "config/prompts/humble_scene_questions_v1.yaml"}
    tiny_config["humblebench"]["scene_graphs"] = scene_graphs
    with pytest.raises(ConfigError, match=r"^config key 'humblebench\.scene_graphs\.file'"):
        check_files(tiny_config)
    (tmp_path / "graphs.json").write_text("[]")
    check_files(tiny_config)


COMMANDS = [["plan"], ["throughput", "results/benchmarks"], ["targets"], ["fetch-models", "--dry-run"], ["doctor"]]


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_cli_command_stops_a_bad_config_file_with_one_line(tmp_path, capsys, command):
    from blindspot.cli import main

    duplicate = tiny_with(tmp_path, "shard_size:", "shard_size: 2\nshard_size:")
    broken = tmp_path / "broken.yaml"
    broken.write_text("seed: [1\n")
    for path, expected in [(duplicate, "key 'shard_size' is given twice"), (broken, "line 2, column 1")]:
        with pytest.raises(SystemExit) as exit_info:
            main([command[0], "--configfile", str(path), *command[1:]])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert err.splitlines()[-1].startswith(f"blindspot: error: config file {path} line ")
        assert expected in err.splitlines()[-1]


def test_a_job_run_by_hand_stops_a_bad_config_file_with_one_line(tmp_path):
    path = tiny_with(tmp_path, "shard_size:", "shard_size: 2\nshard_size:")
    done = subprocess.run(
        [sys.executable, "-m", "blindspot.steps", "run", "make_seeds", "--configfile", str(path), "domain=animals"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(f"config file {path} line ")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("shard_size:", "shard_size: 2\nshard_size:", "key 'shard_size' is given twice"),
        (
            "config/prompts/generate_triplet_v2.yaml",
            "config/prompts/nowhere.yaml",
            "config key 'prompt_stage.generate_template': config/prompts/nowhere.yaml does not exist",
        ),
        # before this was checked, the build job's input function raised with a Snakemake traceback
        (
            "{recipe: random_align_score, tokenizer_from: smollm2-135m}",
            "{recipe: random_align_score, tokenizer_from: nope}",
            "config key 'models.tiny-alignscore.build.tokenizer_from': model 'nope' is not in the registry (models: ",
        ),
    ],
)
def test_the_workflow_stops_a_bad_config_with_the_line_naming_it(tmp_path, old, new, expected):
    path = tiny_with(tmp_path, old, new)
    done = subprocess.run(
        [*SNAKEMAKE, "-n", "--configfile", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    output = done.stdout + done.stderr  # Snakemake logs its errors to stdout
    lines = output.strip().splitlines()
    assert any(line.startswith(("config file", "config key")) and expected in line for line in lines)
    # Snakemake names where the check ran (common.smk), but shows no traceback of the check itself.
    assert len(lines) <= 3
    assert "config.py" not in output


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "learning_rate: 1.0e-3",
            "learning_rate: 1e-3",
            "config key 'protoscore.learning_rate': '1e-3' is not of type 'number'; YAML reads 1e-3 as text: write "
            "1.0e-3",
        ),
        (
            "learning_rate: 1.0e-3",
            "learning_rate: 2.5E3",
            "config key 'protoscore.learning_rate': '2.5E3' is not of type 'number'; YAML reads 2.5E3 as text: write "
            "2.5E+3",
        ),
        (
            "learning_rate: 1.0e-3",
            "learning_rate: '0.001'",
            "config key 'protoscore.learning_rate': '0.001' is not of type 'number'; YAML reads 0.001 as text: write "
            "0.001 without quotes",
        ),
        (
            "epochs: 1",
            "epochs: 1e1",
            "config key 'protoscore.epochs': '1e1' is not of type 'integer'; YAML reads 1e1 as text: write 10",
        ),
    ],
)
def test_a_number_yaml_reads_as_text_says_how_to_write_it(tmp_path, old, new, expected):
    """PyYAML reads a float only with a dot and a signed exponent: 1e-3 and 2.5E3 are strings."""
    with pytest.raises(ConfigError) as error:
        load_config(tiny_with(tmp_path, old, new))
    assert str(error.value) == expected
    written = expected.rsplit("write ", 1)[1].removesuffix(" without quotes")
    value = new.split(": ", 1)[1].strip("'")
    assert yaml.safe_load(f"x: {written}")["x"] == float(value)  # what the hint says is read as the number


def test_text_that_is_no_number_gets_no_yaml_hint(tiny_config):
    tiny_config["protoscore"]["learning_rate"] = "fast"
    with pytest.raises(ConfigError) as error:
        validate_config(tiny_config)
    assert str(error.value) == "config key 'protoscore.learning_rate': 'fast' is not of type 'number'"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("epochs: 1", "epochs: 8.0", "config key 'protoscore.epochs': 8.0 is not of type 'integer'"),
        ("shard_size: 8", "shard_size: 8.0", "config key 'shard_size': 8.0 is not of type 'integer'"),
        ("epochs: 1", "epochs: true", "config key 'protoscore.epochs': True is not of type 'integer'"),
        (
            "animals: {taxonomy: config/taxonomy/animals.yaml, n_seeds: 8}",
            "animals: {taxonomy: config/taxonomy/animals.yaml, n_seeds: 8.0}",
            "config key 'domains.animals.n_seeds': 8.0 is not of type 'integer'",
        ),
    ],
)
def test_an_integer_key_refuses_a_float_or_a_bool(tmp_path, old, new, expected):
    with pytest.raises(ConfigError) as error:
        load_config(tiny_with(tmp_path, old, new))
    assert str(error.value) == expected


def test_a_number_key_still_takes_an_integer(tiny_config):
    tiny_config["protoscore"]["margin"] = 1
    tiny_config["image_stage"]["consensus_threshold"] = 7
    validate_config(tiny_config)


def with_scene_graphs(config, tmp_path):
    """`config` with HumbleBench's scene graphs on (their file an empty list)."""
    from helpers.workflow import SCENE_GRAPHS

    (tmp_path / "graphs.json").write_text("[]")
    config["humblebench"]["scene_graphs"] = SCENE_GRAPHS | {"file": str(tmp_path / "graphs.json")}
    return config


# The files only a job reads; the config check finds a missing one before any job runs.
JOB_FILES = [
    ("annotation", "pairwise_labels", "choices.json"),
    ("annotation", "image_score_labels", "scores.json"),
    ("evaluation", "human_choices", "humans.csv"),
    ("humblebench", "human_answers", "answers.csv"),
    ("protoscore", "transfer", "transfer.jsonl"),
    ("humblebench.scene_graphs", "verification", "verified.csv"),
]


@pytest.mark.parametrize(("section", "name", "file"), JOB_FILES, ids=[f"{s}.{n}" for s, n, _ in JOB_FILES])
def test_a_missing_file_that_only_a_job_reads_fails_the_config_check(tiny_config, tmp_path, section, name, file):
    config = with_scene_graphs(tiny_config, tmp_path)
    part = config
    for level in section.split("."):
        part = part[level]
    missing = tmp_path / file
    part[name] = str(missing)
    key = f"{section}.{name}"
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    assert str(error.value) == f"config key '{key}': {missing} does not exist (relative paths start at {Path.cwd()})"
    missing.mkdir()
    with pytest.raises(ConfigError) as error:
        check_files(config)
    assert str(error.value) == f"config key '{key}': {missing} is not a file (relative paths start at {Path.cwd()})"
    missing.rmdir()
    missing.write_text("")
    check_files(config)


def test_a_local_release_that_is_not_there_fails_the_config_check(tmp_path):
    path = tiny_with(tmp_path, "  release: null", "  release: data/x.jsonl")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value) == (
        f"config key 'humblebench.release': data/x.jsonl does not exist (relative paths start at {Path.cwd()})"
    )


@pytest.mark.parametrize("key", ["humblebench.release", "dataset.path"])
@pytest.mark.parametrize(
    "value", ["data/x.jsonl", "x.parquet", "data/x.csv", "./release", "../release", "/nowhere/x", "release_copy"]
)
def test_a_dataset_that_is_a_local_path_must_be_there(tiny_config, key, value):
    section, name = key.split(".")
    tiny_config.setdefault(section, {})[name] = value
    with pytest.raises(ConfigError) as error:
        check_files(tiny_config)
    assert str(error.value) == f"config key '{key}': {value} does not exist (relative paths start at {Path.cwd()})"


@pytest.mark.parametrize("key", ["humblebench.release", "dataset.path"])
def test_a_hub_dataset_or_a_local_copy_passes_the_config_check(tiny_config, tmp_path, key):
    section, name = key.split(".")
    tiny_config.setdefault(section, {})[name] = "maifoundations/HumbleBench"  # a hub id: the cache is fetch-models'
    check_files(tiny_config)
    (tmp_path / "release").mkdir()
    (tmp_path / "release.jsonl").write_text("")
    for local in (tmp_path / "release", tmp_path / "release.jsonl"):
        tiny_config[section][name] = str(local)
        check_files(tiny_config)


@pytest.mark.parametrize(
    ("model", "key"),
    [("tiny-flux", "pipeline"), ("tiny-sd3", "render"), ("niqe", "metric"), ("tiny-musiq", "metric")],
)
def test_a_t2i_model_needs_its_pipeline_and_render_and_an_iqa_model_its_metric(tiny_config, model, key):
    del tiny_config["models"][model][key]
    with pytest.raises(ConfigError) as error:
        validate_config(tiny_config)
    assert str(error.value) == f"config key 'models.{model}.{key}': '{key}' is a required property"


def test_pipeline_render_and_metric_are_asked_only_of_their_backends(tiny_config):
    validate_config(tiny_config)
    assert "pipeline" not in tiny_config["models"]["tiny-qwen2"]
    assert "metric" not in tiny_config["models"]["tiny-qwen2"]
    assert "render" not in tiny_config["models"]["local-api-judge"]


def test_a_build_that_borrows_a_tokenizer_of_no_registry_model_names_the_key(tiny_config):
    tiny_config["models"]["tiny-qwen2.5-vl"]["build"]["tokenizer_from"] = "smollm3"
    with pytest.raises(ConfigError) as error:
        validate_config(tiny_config)
    models = ", ".join(sorted(tiny_config["models"]))
    assert str(error.value) == (
        "config key 'models.tiny-qwen2.5-vl.build.tokenizer_from': model 'smollm3' is not in the registry "
        f"(models: {models})"
    )


def test_a_config_scoring_a_released_dataset_reads_no_taxonomy(tiny_config, tmp_path):
    """`evaluate protobias` names its table's domains (`all` when it has no domain column) with the base
    config's taxonomy and the table's triplet count: no seed is sampled, so neither is checked."""
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("neutral_prompt,image_corr,image_adv\n")
    taxonomy = tiny_config["domains"]["animals"]["taxonomy"]
    tiny_config["domains"] = {"all": {"taxonomy": taxonomy, "n_seeds": 10**9}}
    with pytest.raises(ConfigError, match="config names it 'all'"):
        validate_config(tiny_config)
    tiny_config["dataset"] = {"path": str(pairs)}
    tiny_config["humblebench"]["from_benchmark"] = None  # a released benchmark's questions are the release's
    del tiny_config["evaluation"]["metrics"]["protoscore"]  # trained on a built benchmark
    validate_config(tiny_config)


def test_absolute_paths_reach_the_keys_of_models_whose_names_hold_dots(tmp_path, tiny_config):
    """A registry name such as `tiny-qwen2.5-vl`: its local folder and its protocol's prompt start at the checkout."""
    from blindspot.checks import absolute_paths

    (tmp_path / "weights").mkdir()
    tiny_config["models"]["my-vlm-2.5"] = {"id": "weights", "backend": "transformers", "gpus": 0, "dtype": "float32"}
    tiny_config["models"]["my-vlm-2.5"]["humble_protocol"] = {"prompt": "prompts/mine.yaml"}
    moved = absolute_paths(tiny_config, tmp_path)
    entry = moved["models"]["my-vlm-2.5"]
    assert (entry["id"], entry["humble_protocol"]["prompt"]) == (
        str(tmp_path / "weights"),
        str(tmp_path / "prompts/mine.yaml"),
    )
    assert moved["humblebench"]["prompt"] == str(tmp_path / tiny_config["humblebench"]["prompt"])
    assert tiny_config["models"]["my-vlm-2.5"]["id"] == "weights"  # the config itself is left as it was
