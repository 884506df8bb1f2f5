"""`blindspot fetch-models`: which hub repositories a config reads, which of their files the loaders
read, what the hub cache already holds (decided without a network), and real downloads through
huggingface_hub from a hub on 127.0.0.1 (tests/helpers/hub_cache.py)."""

import copy
import io
import json
from pathlib import Path

import pytest
import yaml
from helpers.hub_cache import (
    COMMIT,
    OPEN_TOKEN,
    OTHER_COMMIT,
    FakeHub,
    clear_token,
    lay_out,
    transformers_repo,
    with_hub_models,
)

from blindspot.checks import validate_config
from blindspot.cli import main
from blindspot.config import ConfigError
from blindspot.hub import cache as hub_cache
from blindspot.hub import fetch as hub_fetch
from blindspot.hub import repos as hub
from blindspot.metrics import hpsv2, image_reward


def select(model: hub.HubModel, files: dict[str, bytes]) -> hub_cache.Selection:
    return hub_cache.select_files(model, files, lambda path: json.loads(files[path]))


def whole(layout: str = "transformers", **fields) -> hub.HubModel:
    return hub.HubModel(("m",), "org/m", None, layout, **fields)


def test_a_transformers_repository_gives_configs_tokenizer_and_the_shards_its_safetensors_index_names():
    chosen = select(whole(), transformers_repo(3))
    shards = [f"model-{i:05d}-of-00003.safetensors" for i in (1, 2, 3)]
    assert set(chosen.files) == {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "model.safetensors.index.json",
        *shards,
    }
    assert chosen.lacking == ()


def test_a_shard_the_index_names_and_the_listing_lacks_is_reported():
    files = transformers_repo(2)
    del files["model-00002-of-00002.safetensors"]
    assert select(whole(), files).lacking == ("model-00002-of-00002.safetensors",)


def test_safetensors_win_over_bin_and_variants_or_original_releases_are_never_read():
    base = {"config.json": b"{}", "tokenizer.model": b"spm"}
    every = base | {
        "model.safetensors": b"s",
        "pytorch_model.bin": b"b",
        "model.fp16.safetensors": b"h",
        "consolidated.safetensors": b"c",
        "tf_model.h5": b"t",
        "model.gguf": b"g",
    }
    assert select(whole(), every).files == ("config.json", "tokenizer.model", "model.safetensors")
    assert select(whole(), base | {"pytorch_model.bin": b"b"}).files == (
        "config.json",
        "tokenizer.model",
        "pytorch_model.bin",
    )
    assert select(whole(), base).lacking[0].startswith("weights in the top folder")
    assert select(whole(), {"model.safetensors": b"s"}).lacking == ("config.json",)


def test_python_files_only_for_a_model_that_runs_remote_code():
    files = {"config.json": b"{}", "model.safetensors": b"s", "modeling_custom.py": b"code"}
    assert "modeling_custom.py" not in select(whole(), files).files
    assert "modeling_custom.py" in select(whole(trust_remote_code=True), files).files


def test_a_diffusers_pipeline_gives_its_components_not_the_single_file_release():
    index = {
        "weight_map": {
            "a": "diffusion_pytorch_model-00001-of-00002.safetensors",
            "b": "diffusion_pytorch_model-00002-of-00002.safetensors",
        }
    }
    model_index = {
        "_class_name": "FluxPipeline",
        "_diffusers_version": "0.30.0",
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "transformer": ["diffusers", "FluxTransformer2DModel"],
        "image_encoder": [None, None],
    }
    files = {
        "model_index.json": json.dumps(model_index).encode(),
        "flux1-schnell.safetensors": b"the single-file release",
        "text_encoders/clip_g.safetensors": b"a copy for other tools",
        "scheduler/scheduler_config.json": b"{}",
        "text_encoder/config.json": b"{}",
        "text_encoder/model.safetensors": b"te",
        "text_encoder/model.fp16.safetensors": b"te16",
        "tokenizer/vocab.json": b"{}",
        "tokenizer/merges.txt": b"",
        "transformer/config.json": b"{}",
        "transformer/diffusion_pytorch_model.safetensors.index.json": json.dumps(index).encode(),
        "transformer/diffusion_pytorch_model-00001-of-00002.safetensors": b"t1",
        "transformer/diffusion_pytorch_model-00002-of-00002.safetensors": b"t2",
    }
    chosen = select(whole("diffusers"), files)
    assert set(chosen.files) == {
        "model_index.json",
        "scheduler/scheduler_config.json",
        "text_encoder/config.json",
        "text_encoder/model.safetensors",
        "tokenizer/vocab.json",
        "tokenizer/merges.txt",
        "transformer/config.json",
        "transformer/diffusion_pytorch_model.safetensors.index.json",
        "transformer/diffusion_pytorch_model-00001-of-00002.safetensors",
        "transformer/diffusion_pytorch_model-00002-of-00002.safetensors",
    }
    assert chosen.lacking == ()
    without_encoder = {path: content for path, content in files.items() if not path.startswith("text_encoder/")}
    assert select(whole("diffusers"), without_encoder).lacking == ("text_encoder/",)


def test_a_sentence_transformer_gives_its_modules_folders_and_the_transformers_weights():
    kinds = {"": "Transformer", "1_Pooling": "Pooling", "2_Normalize": "Normalize"}
    modules = [{"path": path, "type": f"sentence_transformers.models.{kind}"} for path, kind in kinds.items()]
    files = {
        "modules.json": json.dumps(modules).encode(),
        "config.json": b"{}",
        "vocab.txt": b"",
        "sentence_bert_config.json": b"{}",
        "model.safetensors": b"s",
        "pytorch_model.bin": b"b",
        "1_Pooling/config.json": b"{}",
        "onnx/model.onnx": b"o",
        "onnx/config.json": b"{}",
    }
    chosen = select(whole("sentence_transformers"), files)
    assert set(chosen.files) == {
        "modules.json",
        "config.json",
        "vocab.txt",
        "sentence_bert_config.json",
        "model.safetensors",
        "1_Pooling/config.json",
    }
    assert chosen.lacking == ()


def test_a_release_checkpoint_is_one_file_and_a_processor_repository_gives_no_weights():
    files = {"ImageReward.pt": b"ckpt", "med_config.json": b"{}", "README.md": b""}
    assert select(hub.HubModel(("ir",), "THUDM/ImageReward", None, None, files=("ImageReward.pt",)), files) == (
        hub_cache.Selection(("ImageReward.pt",))
    )
    assert select(hub.HubModel(("ir",), "THUDM/ImageReward", None, None, files=("other.pt",)), files).lacking == (
        "other.pt",
    )
    clip = {
        "open_clip_pytorch_model.bin": b"w",
        "model.safetensors": b"w",
        "config.json": b"{}",
        "preprocessor_config.json": b"{}",
        "tokenizer.json": b"{}",
        "merges.txt": b"",
    }
    assert set(select(whole(weights=False), clip).files) == {
        "config.json",
        "preprocessor_config.json",
        "tokenizer.json",
        "merges.txt",
    }


def test_the_paper_config_reads_each_hub_repository_once_with_what_its_plugin_loads(paper_config):
    models = {model.repo_id: model for model in hub.hub_models(paper_config)}
    assert len(models) == len(hub.hub_models(paper_config))
    # the same weights through vLLM (judge metric) and transformers (ProtoScore) are fetched once
    assert models["Qwen/Qwen3-VL-4B-Instruct"].names == ("qwen3-vl-4b-instruct-hf", "qwen3-vl-4b-instruct")
    assert models["THUDM/ImageReward"].files == (image_reward.HUB_CHECKPOINT,)
    assert models["THUDM/ImageReward"].layout is None
    assert models["xswu/HPSv2"].files == (hpsv2.HUB_CHECKPOINT,)
    assert models["yzha/AlignScore"].files == ("AlignScore-large.ckpt",)
    # plug-in arguments that name a repository for its configs and tokenizer
    assert not models["FacebookAI/roberta-large"].weights
    # the official CLIP-FlanT5 builds its tower from the tower's weights, whatever the release holds
    assert models["openai/clip-vit-large-patch14-336"].weights
    assert not models["google/flan-t5-xxl"].weights
    assert models["laion/CLIP-ViT-H-14-laion2B-s32B-b79K"].names == ("pickscore.args.processor",)
    assert models["black-forest-labs/FLUX.1-schnell"].layout == "diffusers"
    assert models["BAAI/bge-large-en-v1.5"].layout == "sentence_transformers"
    # a local pyiqa checkpoint, a built model and an API model are not on the hub
    names = {name for model in models.values() for name in model.names}
    assert {"musiq-koniq", "niqe", "gpt-5"}.isdisjoint(names)
    gated = {model.repo_id for model in models.values() if model.gated}
    assert gated == {
        "meta-llama/Llama-3.1-8B-Instruct",
        "google/gemma-3-12b-it",
        "stabilityai/stable-diffusion-3.5-large-turbo",
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        # HumbleBench's VLMs
        "meta-llama/Llama-3.2-11B-Vision-Instruct",
        "google/gemma-3-4b-it",
        "mistralai/Pixtral-12B-2409",
    }


def test_gated_is_a_boolean_in_the_schema(paper_config):
    validate_config(paper_config)
    paper_config["models"]["gemma-3-12b-it"]["gated"] = "yes"
    with pytest.raises(ConfigError, match=r"models\.gemma-3-12b-it\.gated"):
        validate_config(paper_config)


def test_the_tiny_preset_fetches_nothing_and_says_why_for_each_model(tiny_config, tmp_path):
    out = io.StringIO()
    assert hub_fetch.fetch_models(tiny_config, tmp_path, dry_run=True, out=out) == 0
    lines = out.getvalue().splitlines()[1:]
    assert len(lines) == len(hub.used_models(tiny_config))
    assert all(line.startswith("skip") for line in lines)
    assert "skip     local-api-judge: an API model at http://127.0.0.1:8011/v1" in lines
    built = "skip     tiny-flux: built by build_model (recipe random_diffusers_pipeline)"
    assert any(line.startswith(built) for line in lines)


def cache_config(tiny_config):
    return with_hub_models(
        tiny_config,
        {
            "minilm-l6": {"id": "org/pinned", "revision": COMMIT, "backend": "sentence_transformers"},
            "tiny-deberta-v2-nli": {"id": "org/moved", "revision": COMMIT},
            "tiny-qwen2": {"id": "org/absent"},
            "smollm2-135m": {"id": "org/gated", "gated": True},
        },
    )


def test_the_dry_run_fetches_what_the_cache_lacks_at_the_pinned_revision_without_a_network(
    tiny_config, tmp_path, monkeypatch
):
    clear_token(monkeypatch, tmp_path)
    cache = tmp_path / "hub"
    lay_out(cache, "org/pinned", {"config.json": b"{}", "model.safetensors": b"w"}, ref=None)
    lay_out(cache, "org/moved", {"config.json": b"{}", "model.safetensors": b"w"}, commit=OTHER_COMMIT)
    out = io.StringIO()
    assert hub_fetch.fetch_models(cache_config(tiny_config), cache, dry_run=True, out=out) == 0
    lines = out.getvalue().splitlines()
    assert f"cached   minilm-l6: org/pinned@{COMMIT} ({COMMIT[:12]})" in lines
    assert f"to fetch tiny-deberta-v2-nli: org/moved@{COMMIT}" in lines
    assert "to fetch tiny-qwen2: org/absent@main" in lines
    assert "to fetch smollm2-135m: org/gated@main (gated: no token found)" in lines


def test_fetching_refuses_at_once_when_the_hub_is_switched_off(tiny_config, tmp_path, monkeypatch, capsys):
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(cache_config(tiny_config)))
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(SystemExit) as exit_info:
        main(["fetch-models", "--configfile", str(config_file)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "cannot fetch: HF_HUB_OFFLINE is set" in error
    assert "Traceback" not in error


def test_with_every_model_cached_the_command_needs_no_hub(tiny_config, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(with_hub_models(tiny_config, {"tiny-qwen2": {"id": "org/pinned"}})))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    lay_out(tmp_path / "hub", "org/pinned", {"config.json": b"{}", "model.safetensors": b"w"})
    assert main(["fetch-models", "--configfile", str(config_file)]) == 0
    assert f"cached   tiny-qwen2: org/pinned@main ({COMMIT[:12]})" in capsys.readouterr().out.splitlines()


def repositories():
    """Distinct contents, so that no two files share a blob."""
    llm = {path: content + path.encode() for path, content in transformers_repo(2).items()}
    llm["model.safetensors.index.json"] = transformers_repo(2)["model.safetensors.index.json"]
    return {
        "org/llm": llm,
        "org/gated": {"config.json": b'{"gated": 1}', "model.safetensors": b"gated weights"},
        "org/weights-only": {"model.safetensors": b"weights without a config"},
    }


@pytest.fixture
def online(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    clear_token(monkeypatch, tmp_path)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def test_fetching_downloads_only_what_the_loaders_read_then_nothing_when_cached(tiny_config, tmp_path, online):
    config = with_hub_models(tiny_config, {"tiny-qwen2": {"id": "org/llm"}})
    cache = tmp_path / "hub"
    with FakeHub(repositories()) as fake:
        out = io.StringIO()
        assert hub_fetch.fetch_models(config, cache, endpoint=fake.endpoint, out=out) == 0
        assert f"fetched  tiny-qwen2: org/llm@main ({COMMIT[:12]})" in out.getvalue().splitlines()
        assert set(fake.downloads) == {f"org/llm/{path}" for path in select(whole(), repositories()["org/llm"]).files}
        assert not any(path.endswith((".bin", ".onnx", ".pth", ".md")) for path in fake.downloads)
        (model,) = hub.hub_models(config)
        assert hub_cache.cache_state(model, cache).complete
        first = fake.downloads.copy()
        out = io.StringIO()
        assert hub_fetch.fetch_models(config, cache, endpoint=fake.endpoint, out=out) == 0
        assert f"cached   tiny-qwen2: org/llm@main ({COMMIT[:12]})" in out.getvalue().splitlines()
        assert fake.downloads == first


def test_an_interrupted_fetch_resumes_with_the_files_still_missing(tiny_config, tmp_path, online):
    config = with_hub_models(tiny_config, {"tiny-qwen2": {"id": "org/llm"}})
    cache = tmp_path / "hub"
    with FakeHub(repositories()) as fake:
        assert hub_fetch.fetch_models(config, cache, endpoint=fake.endpoint, out=io.StringIO()) == 0
        # what a kill during the second shard leaves: no link to it, its blob not in place
        shard = hub_cache.repo_folder(cache, "org/llm") / "snapshots" / COMMIT / "model-00002-of-00002.safetensors"
        shard.resolve().unlink()
        shard.unlink()
        (model,) = hub.hub_models(config)
        assert hub_cache.cache_state(model, cache).lacking == ("model-00002-of-00002.safetensors",)
        first = fake.downloads.copy()
        assert hub_fetch.fetch_models(config, cache, endpoint=fake.endpoint, out=io.StringIO()) == 0
        assert fake.downloads - first == {"org/llm/model-00002-of-00002.safetensors": 1}
        assert hub_cache.cache_state(model, cache).complete


def test_a_gated_model_without_access_is_one_line_and_the_others_are_still_fetched(
    tiny_config, tmp_path, online, monkeypatch
):
    # the registry does not flag it: the hub's answer says it is gated
    config = with_hub_models(tiny_config, {"tiny-qwen2": {"id": "org/llm"}, "smollm2-135m": {"id": "org/gated"}})
    cache = tmp_path / "hub"
    with FakeHub(repositories(), gated=("org/gated",)) as fake:
        out = io.StringIO()
        assert hub_fetch.fetch_models(config, cache, endpoint=fake.endpoint, out=out) == 1
        lines = out.getvalue().splitlines()
        assert (
            f"FAILED   smollm2-135m: org/gated is gated on the hub: accept its terms at {fake.endpoint}/org/gated "
            "with your account, then set HF_TOKEN or run `hf auth login`"
        ) in lines
        assert f"fetched  tiny-qwen2: org/llm@main ({COMMIT[:12]})" in lines
        assert not any(path.startswith("org/gated") for path in fake.downloads)
        monkeypatch.setenv("HF_TOKEN", OPEN_TOKEN)
        assert hub_fetch.fetch_models(config, cache, endpoint=fake.endpoint, out=io.StringIO()) == 0
        assert fake.downloads["org/gated/model.safetensors"] == 1


def test_a_model_flagged_gated_is_refused_before_any_download_without_a_token(tiny_config, tmp_path, online):
    config = with_hub_models(tiny_config, {"smollm2-135m": {"id": "org/gated", "gated": True}})
    with FakeHub(repositories()) as fake:  # the hub would even serve it: the flag decides first
        out = io.StringIO()
        assert hub_fetch.fetch_models(config, tmp_path / "hub", endpoint=fake.endpoint, out=out) == 1
        assert "set HF_TOKEN or run `hf auth login` (no token found)" in out.getvalue()
        assert not fake.downloads


def test_a_repository_without_what_the_loader_reads_is_one_line_and_nothing_is_downloaded(
    tiny_config, tmp_path, online
):
    config = with_hub_models(tiny_config, {"tiny-qwen2": {"id": "org/weights-only"}})
    with FakeHub(repositories()) as fake:
        out = io.StringIO()
        assert hub_fetch.fetch_models(config, tmp_path / "hub", endpoint=fake.endpoint, out=out) == 1
        assert "FAILED   tiny-qwen2: org/weights-only@main lacks config.json, which its loader reads" in out.getvalue()
        assert not fake.downloads


def test_a_dataset_is_read_whole_and_a_cut_off_download_lacks_its_missing_shards():
    release = hub.HubModel(("humblebench.release",), "org/humble", None, "dataset", repo_type="dataset")
    listing = {"README.md": b"", "data/train-00000-of-00003.parquet": b"", "data/train-00002-of-00003.parquet": b""}
    assert select(release, listing) == hub_cache.Selection(
        tuple(sorted(listing)), ("data/train-00001-of-00003.parquet",)
    )


def test_a_hub_release_is_fetched_with_the_models_then_read_from_the_cache_offline(
    tiny_config, tmp_path, online, monkeypatch
):
    from helpers.humble import imagefolder
    from huggingface_hub import constants

    from blindspot.humblebench.release import load_release

    published = imagefolder(tmp_path / "published")  # maifoundations/HumbleBench's layout
    files = {
        path.relative_to(published).as_posix(): path.read_bytes() for path in published.rglob("*") if path.is_file()
    }
    config = copy.deepcopy(tiny_config)
    config["humblebench"]["release"] = "org/humble"
    cache = tmp_path / "hub"
    with FakeHub({}, datasets={"org/humble": files}) as fake:
        out = io.StringIO()
        assert hub_fetch.fetch_models(config, cache, endpoint=fake.endpoint, out=out) == 0
        assert f"fetched  humblebench.release: org/humble@main ({COMMIT[:12]})" in out.getvalue().splitlines()
        assert set(fake.downloads) == {f"org/humble/{path}" for path in files}
    (release,) = hub.hub_models(config)
    assert hub_cache.cache_state(release, cache).complete
    # A job: the hub is off, and the release comes from the cache under HF_HOME.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    rows = load_release("org/humble", tmp_path / "images")
    assert [row["question_id"] for row in rows] == ["1", "2", "3"]
    assert all(Path(row["image_path"]).is_file() for row in rows)
    with pytest.raises(ValueError, match=r"^release org/other: not in the hub cache and the hub is off"):
        load_release("org/other", tmp_path / "images")


def test_a_job_names_the_commit_of_the_weights_it_reads_from_the_cache(tiny_config, tmp_path, monkeypatch):
    """A hub model's spec carries the commit its branch pointed at when fetched, so rows, journals and
    score caches name the weights, and a re-fetch that moves the branch changes the job's params."""
    from huggingface_hub import constants

    from blindspot.models.spec import model_spec

    config = with_hub_models(tiny_config, {"tiny-qwen2": {"id": "org/llm"}})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert model_spec(config, "tiny-qwen2").revision is None  # not fetched yet: nothing to name
    lay_out(tmp_path / "hub", "org/llm", {"config.json": b"{}", "model.safetensors": b"w"})
    assert model_spec(config, "tiny-qwen2").revision == COMMIT
    lay_out(tmp_path / "hub", "org/llm", {"config.json": b"{}", "model.safetensors": b"v"}, commit=OTHER_COMMIT)
    assert model_spec(config, "tiny-qwen2").revision == OTHER_COMMIT
    config["models"]["tiny-qwen2"]["revision"] = COMMIT  # a pinned commit stays as given
    assert model_spec(config, "tiny-qwen2").revision == COMMIT
