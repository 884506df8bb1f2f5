import pytest

from blindspot.config import ConfigError, model_spec, n_shards, shard_names, shard_slice, validate_config


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
    ],
)
def test_a_bad_key_stops_with_a_message_naming_it(paper_config, edit, key):
    edit(paper_config)
    with pytest.raises(ConfigError, match=f"'{key}'"):
        validate_config(paper_config)


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
