"""Whether a model fits its role, read from its config.json, against the loaders that would load it."""

import copy
import json
import subprocess

import pytest
import yaml
from helpers.envs import VLLM_PYTHON
from helpers.evaluate import GOOD_RECORD
from helpers.hub_cache import lay_out, with_hub_models
from helpers.images import grey_image
from helpers.workflow import REPO

from blindspot.doctor import models as doctor_models
from blindspot.doctor.report import FAIL, OK, WARN
from blindspot.models import roles
from blindspot.registry import built_model_dir

# config.json fields of real releases (their model_type, architectures and whether a vision part is
# there), for models vLLM serves: what the vLLM verdict reads.
RELEASES = {
    "Qwen/Qwen2.5-VL-32B-Instruct": {
        "model_type": "qwen2_5_vl",
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "vision_config": {"depth": 32},
    },
    "OpenGVLab/InternVL3-38B-Instruct": {
        "model_type": "internvl_chat",
        "architectures": ["InternVLChatModel"],
        "vision_config": {"model_type": "intern_vit_6b"},
        "auto_map": {"AutoModel": "modeling_internvl_chat.InternVLChatModel"},
    },
    "google/gemma-3-27b-it": {
        "model_type": "gemma3",
        "architectures": ["Gemma3ForConditionalGeneration"],
        "vision_config": {"model_type": "siglip_vision_model"},
    },
    "llava-hf/llava-1.5-7b-hf": {
        "model_type": "llava",
        "architectures": ["LlavaForConditionalGeneration"],
        "vision_config": {"model_type": "clip_vision_model"},
    },
    "Qwen/Qwen2.5-7B-Instruct": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]},
    "meta-llama/Llama-3.1-8B-Instruct": {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
    "google/gemma-3-1b-it": {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"]},
    # a VLM whose config has no vision part: the verdict cannot tell
    "microsoft/Phi-3-vision-128k-instruct": {
        "model_type": "phi3_v",
        "architectures": ["Phi3VForCausalLM"],
        "img_processor": {"name": "clip_vision_model"},
    },
}


def test_the_tiny_presets_roles_all_fit_and_each_verdict_is_what_its_loader_does(built_config, tmp_path):
    import transformers

    fits = roles.role_fits(built_config, tmp_path / "hub")
    assert all(fit.takes for fit in fits), [roles.misplaced(fit) for fit in fits if not fit.takes]
    by_model = {(fit.name, fit.needs): fit for fit in fits}
    assert by_model["tiny-qwen2.5-vl", "images"].keys == (
        "image_stage.vlms",
        "humblebench.vlms",
        "evaluation.metrics.alignscore.models.captioner",
        "evaluation.metrics.vqascore-vlm.model",
        "evaluation.metrics.vlm-judge.model",
    )
    assert by_model["tiny-qwen3-vl", "images"].keys == ("protoscore.model", "evaluation.metrics.protoscore.model")
    assert {name for name, needs in by_model if needs == "text"} == {"smollm2-135m", "tiny-qwen2"}
    # swapped: the VLMs where text is generated, the LLMs where images go; each verdict against the real loader
    swapped = copy.deepcopy(built_config)
    swapped["image_stage"]["vlms"] = ["tiny-qwen2", "tiny-qwen2.5-vl"]
    swapped["prompt_stage"]["judges"] = ["tiny-internvl3", "smollm2-135m"]
    for fit in roles.role_fits(swapped, tmp_path / "hub"):
        auto_class = getattr(transformers, roles.TRANSFORMERS_CLASSES[fit.needs])
        model_config = transformers.AutoConfig.from_pretrained(built_model_dir(swapped, fit.name))
        if fit.takes:
            auto_class.from_config(model_config)
        else:
            with pytest.raises(ValueError, match="Unrecognized configuration class"):
                auto_class.from_config(model_config)
    unfit = {fit.name: roles.misplaced(fit) for fit in roles.role_fits(swapped, tmp_path / "hub") if not fit.takes}
    assert unfit == {
        "tiny-qwen2": "config key 'image_stage.vlms': model 'tiny-qwen2' cannot read the images its role asks for "
        "through transformers: transformers' AutoModelForImageTextToText does not take model type qwen2 "
        "(Qwen2ForCausalLM)",
        "tiny-internvl3": "config key 'prompt_stage.judges': model 'tiny-internvl3' cannot generate the text its "
        "role asks for through transformers: transformers' AutoModelForCausalLM does not take model type internvl "
        "(InternVLForConditionalGeneration)",
    }


def hub_config(tiny_config, names: dict[str, str], backend: str) -> dict:
    """The tiny preset with registry `names` as the hub repositories `names[name]`, on `backend`."""
    return with_hub_models(tiny_config, {name: {"id": repo, "backend": backend} for name, repo in names.items()})


def test_a_cached_vllm_model_reads_images_when_its_config_has_a_vision_part(tiny_config, tmp_path):
    cache = tmp_path / "hub"
    for repo, model in RELEASES.items():
        lay_out(cache, repo, {"config.json": json.dumps(model).encode()})
    config = hub_config(
        tiny_config,
        {
            "tiny-qwen2.5-vl": "OpenGVLab/InternVL3-38B-Instruct",
            "tiny-internvl3": "Qwen/Qwen2.5-7B-Instruct",
            "phi-3-vision": "microsoft/Phi-3-vision-128k-instruct",
        },
        "vllm",
    )
    config["resources_dir"] = str(tmp_path / "resources")  # nothing built: only the hub models have a config.json
    config["models"]["tiny-qwen2.5-vl"]["trust_remote_code"] = True
    config["image_stage"]["vlms"] = ["phi-3-vision"]
    fits = {(fit.name, fit.loader): fit for fit in roles.role_fits(config, cache)}
    assert fits["tiny-qwen2.5-vl", "vllm"].keys == ("humblebench.vlms", "evaluation.metrics.vlm-judge.model")
    assert fits["tiny-qwen2.5-vl", "vllm"].takes
    # the same model where plug-ins load it through transformers: its remote code maps no AutoModelForImageTextToText
    assert fits["tiny-qwen2.5-vl", "transformers"].keys == (
        "evaluation.metrics.alignscore.models.captioner",
        "evaluation.metrics.vqascore-vlm.model",
    )
    assert fits["tiny-qwen2.5-vl", "transformers"].takes is False
    # a config that writes its vision part as null has none
    text_model = RELEASES["meta-llama/Llama-3.1-8B-Instruct"] | {"vision_config": None}
    assert roles.vllm_reads_images(text_model)[0] is False
    assert fits["tiny-internvl3", "vllm"].takes is False
    assert fits["phi-3-vision", "vllm"].takes is None
    assert set(fits) == {
        ("tiny-qwen2.5-vl", "vllm"),
        ("tiny-qwen2.5-vl", "transformers"),
        ("tiny-internvl3", "vllm"),
        ("phi-3-vision", "vllm"),
    }
    checks = {(c.subject, c.verdict): c.reason for c in doctor_models.role_checks(config, cache)}
    assert checks == {
        ("tiny-qwen2.5-vl", OK): "humblebench.vlms, evaluation.metrics.vlm-judge.model through vllm: its "
        "config has a vision part (model type internvl_chat (InternVLChatModel))",
        ("tiny-qwen2.5-vl", FAIL): "evaluation.metrics.alignscore.models.captioner, "
        "evaluation.metrics.vqascore-vlm.model through transformers: transformers' AutoModelForImageTextToText "
        "does not take model type internvl_chat (InternVLChatModel)",
        ("tiny-internvl3", FAIL): "humblebench.vlms through vllm: a text-only model: model type qwen2 "
        "(Qwen2ForCausalLM), no vision part in its config",
        ("phi-3-vision", WARN): "image_stage.vlms through vllm: cannot tell from its config whether vLLM "
        "reads images with model type phi3_v (Phi3VForCausalLM): it has no vision part; check that vLLM lists "
        "Phi3VForCausalLM among its multimodal models",
    }
    # a model not yet in the cache has no verdict: the model checks say it is missing
    assert doctor_models.role_checks(config, tmp_path / "empty") == []


def test_remote_code_counts_where_transformers_runs_it_and_vllms_text_roles_are_not_checked(tiny_config, tmp_path):
    cache = tmp_path / "hub"
    remote = {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "auto_map": {"AutoConfig": "configuration.MyConfig", "AutoModelForImageTextToText": "modeling.MyVLM"},
    }
    layouts = {
        "org/remote-vlm": remote,
        "org/remote-config": remote | {"auto_map": {"AutoConfig": "configuration.MyConfig"}},
        "org/odd": {"model_type": ["qwen2"], "architectures": "Qwen2ForCausalLM"},
        "org/vlm": RELEASES["Qwen/Qwen2.5-VL-32B-Instruct"],
    }
    for repo, model in layouts.items():
        lay_out(cache, repo, {"config.json": json.dumps(model).encode()})
    lay_out(cache, "org/broken", {"config.json": b'{"model_type": '})
    config = hub_config(
        tiny_config,
        {
            "trusted": "org/remote-vlm",
            "untrusted": "org/remote-vlm",
            "own-config": "org/remote-config",
            "odd": "org/odd",
            "broken": "org/broken",
        },
        "transformers",
    )
    config = with_hub_models(config, {"vlm-generator": {"id": "org/vlm", "backend": "vllm"}})
    for name in ("trusted", "own-config"):
        config["models"][name]["trust_remote_code"] = True
    config["resources_dir"] = str(tmp_path / "resources")
    config["humblebench"]["vlms"] = ["trusted", "untrusted", "own-config", "odd", "broken"]
    config["prompt_stage"]["generators"] = ["vlm-generator"]  # vLLM generates text with a VLM
    (tmp_path / "local").mkdir()  # a local folder without config.json
    config["models"]["tiny-internvl3"] = {"id": str(tmp_path / "local"), "backend": "transformers", "gpus": 0}
    config["image_stage"]["vlms"] = ["tiny-internvl3"]
    fits = {fit.name: fit for fit in roles.role_fits(config, cache)}
    assert set(fits) == {"trusted", "untrusted", "own-config", "odd", "broken", "tiny-internvl3"}
    assert (fits["trusted"].takes, fits["trusted"].reason) == (True, "its remote code maps AutoModelForImageTextToText")
    # untrusted, transformers reads the type qwen2, which it knows only as a causal LM
    assert fits["untrusted"].reason == (
        "transformers' AutoModelForImageTextToText does not take model type qwen2 (Qwen2ForCausalLM)"
    )
    assert fits["own-config"].reason == (
        "its remote code has its own config class and maps no AutoModelForImageTextToText "
        "(model type qwen2 (Qwen2ForCausalLM))"
    )
    assert fits["odd"].reason == "transformers' AutoModelForImageTextToText does not take a config without a model_type"
    assert fits["broken"].takes is False
    assert roles.misplaced(fits["broken"]).startswith(
        "config key 'humblebench.vlms': model 'broken' cannot read the images its role asks for through "
        "transformers: its config.json cannot be read: "
    )
    assert (fits["tiny-internvl3"].takes, fits["tiny-internvl3"].reason) == (
        None,
        f"{tmp_path / 'local'} has no config.json, which transformers and vLLM read its kind from",
    )


class Started(Exception):
    """The workflow would start here."""


def test_the_command_refuses_a_model_it_places_where_images_go_before_the_workflow_starts(
    built_config, exported, tmp_path, monkeypatch, capsys
):
    from blindspot.cli import main
    from blindspot.evaluate import run as evaluate_run

    def refused(*argv: str) -> str:
        with pytest.raises(SystemExit):
            main(["evaluate", *argv, "--configfile", str(tmp_path / "base.yaml"), "--results-dir", str(results)])
        return capsys.readouterr().err.splitlines()[-1]

    def workflow(*args):
        raise Started

    results = tmp_path / "results"  # not the base's, in the checkout
    grey_image(tmp_path / "pixel.png", 128)
    (tmp_path / "release.jsonl").write_text(json.dumps(GOOD_RECORD) + "\n")
    base = copy.deepcopy(built_config)
    base["image_stage"]["vlms"] = ["smollm2-135m"]  # unfit, but no command below runs the image stage
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(evaluate_run, "run_workflow", workflow)
    assert refused("humblebench", "--release", "release.jsonl", "--vlm", "tiny-qwen2") == (
        "blindspot: error: config key 'humblebench.vlms': model 'tiny-qwen2' cannot read the images its role asks "
        "for through transformers: transformers' AutoModelForImageTextToText does not take model type qwen2 "
        "(Qwen2ForCausalLM)"
    )
    # a plug-in named by its module and class, with a text-only model
    line = refused(
        "protobias", "--dataset", str(exported[1]), "--metric", "blindspot.metrics.vqa_score:VQAScore@tiny-qwen2"
    )
    assert line.startswith("blindspot: error: config key 'evaluation.metrics.")
    assert line.endswith(
        ".model': model 'tiny-qwen2' cannot read the images its role asks for through transformers: "
        "transformers' AutoModelForImageTextToText does not take model type qwen2 (Qwen2ForCausalLM)"
    )
    with pytest.raises(Started):
        main(
            [
                "evaluate",
                "humblebench",
                "--release",
                "release.jsonl",
                "--vlm",
                "tiny-qwen2.5-vl",
                "--configfile",
                str(tmp_path / "base.yaml"),
                "--results-dir",
                str(results),
            ]
        )
    assert (results / "evaluate_config.yaml").is_file()  # written, then the workflow would start


def test_every_role_a_language_model_fills_is_checked():
    from blindspot.registry import ROLES

    unchecked = {role.key for role in ROLES if "transformers" in role.backends and role.needs is None}
    assert unchecked == {"prompt_stage.nli_model"}  # a sequence classifier, loaded by its own auto class


@pytest.mark.vllm
@pytest.mark.slow
def test_the_vllm_verdict_never_contradicts_vllms_own_registry(tmp_path):
    """Each release's verdict is vLLM's (its registry's multimodal architectures), or cannot be told."""
    if not VLLM_PYTHON.exists():
        pytest.fail(f"{VLLM_PYTHON} is missing: run ./setup.sh --vllm (or deselect with -m 'not vllm')")
    code = (
        "import json, sys\nfrom vllm.model_executor.models import registry\n"
        "print(json.dumps({a: a in registry._MULTIMODAL_MODELS for a in json.load(sys.stdin)}))"
    )
    architectures = [model["architectures"][0] for model in RELEASES.values()]
    done = subprocess.run(
        [str(VLLM_PYTHON), "-c", code],
        input=json.dumps(architectures),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        check=True,
    )
    multimodal = json.loads(done.stdout.splitlines()[-1])
    verdicts = {repo: roles.vllm_reads_images(model)[0] for repo, model in RELEASES.items()}
    assert verdicts == {repo: multimodal[model["architectures"][0]] for repo, model in RELEASES.items()} | {
        "microsoft/Phi-3-vision-128k-instruct": None
    }
    assert multimodal["Phi3VForCausalLM"]  # the one vLLM reads images with that its config cannot tell
