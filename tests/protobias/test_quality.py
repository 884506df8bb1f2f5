import dataclasses
import shutil

import numpy as np
import pandas as pd
import pytest
from transformers import AutoConfig

from blindspot.models.spec import model_spec
from blindspot.protobias.quality import NLI_LABELS, nli_probabilities, score_prompt_quality, table1


def quality_rows(domain, sims, nli_t_dc, nli_t_da, nli_dc_da):
    return pd.DataFrame(
        {
            "triplet_id": [f"{domain}{i}" for i in range(len(sims))],
            "domain": domain,
            "sim_t_dc": [s[0] for s in sims],
            "sim_t_da": [s[1] for s in sims],
            "sim_dc_da": [s[2] for s in sims],
            "nli_t_dc": nli_t_dc,
            "nli_t_da": nli_t_da,
            "nli_dc_da": nli_dc_da,
        }
    )


def test_table1_aggregates_per_domain_and_pools_overall():
    animals = quality_rows(
        "animals",
        [(0.9, 0.8, 0.7), (0.7, 0.6, 0.5)],
        ["entailment", "contradiction"],
        ["neutral", "neutral"],
        ["contradiction", "contradiction"],
    )
    objects = quality_rows("objects", [(0.4, 0.1, 0.1)], ["neutral"], ["contradiction"], ["entailment"])
    table = table1({"animals": animals, "objects": objects}).set_index("check")
    assert list(table.columns) == ["group", "Animals", "Objects", "Overall"]
    assert table.loc["sim(T, D_c)", "Animals"] == pytest.approx(0.8)
    assert table.loc["sim(T, D_c)", "Overall"] == pytest.approx((0.9 + 0.7 + 0.4) / 3)  # pooled, not mean of means
    assert table.loc["T -> D_c ent./neu. (%)", "Animals"] == pytest.approx(50.0)
    assert table.loc["T -> D_c ent./neu. (%)", "Objects"] == pytest.approx(100.0)
    assert table.loc["T -> D_a ent./neu. (%)", "Overall"] == pytest.approx(200 / 3)
    assert table.loc["D_c <-> D_a contra. (%)", "Overall"] == pytest.approx(200 / 3)
    assert table.loc["triplets", "Overall"] == 3


@pytest.mark.slow
def test_prompt_quality_with_real_embeddings_and_a_tiny_nli(built_config):
    triplets = pd.DataFrame(
        {
            "triplet_id": ["a", "b"],
            "domain": "animals",
            "neutral_prompt": ["A bird on a rock with one branch.", "A vehicle on a road with a red cone."],
            "correct_description": ["A bird on a rock with one branch.", "A tuk-tuk on a road with a red cone."],
            "adversarial_description": ["A robin on a rock with three branches.", "A quantum theorem about primes."],
        }
    )
    embedder = model_spec(built_config, "minilm-l6")
    nli = model_spec(built_config, "tiny-deberta-v2-nli")
    quality = score_prompt_quality(triplets, embedder, nli, batch_size=4)
    assert quality.loc[0, "sim_t_dc"] == pytest.approx(1.0, abs=1e-5)  # identical texts
    # Real MiniLM weights: a related rewrite is closer than an unrelated sentence.
    assert quality.loc[1, "sim_t_dc"] > quality.loc[1, "sim_dc_da"] + 0.2
    assert set(quality["nli_t_dc"]) <= set(NLI_LABELS)
    assert quality["contradiction_dc_da"].between(0, 1).all()
    assert quality["embedding_model_id"].eq("built:minilm-l6").all()


@pytest.mark.slow
def test_nli_probabilities_are_distributions_and_need_named_labels(built_config, tmp_path):
    nli = model_spec(built_config, "tiny-deberta-v2-nli")
    probs = nli_probabilities([("a dog", "a cat"), ("x", "y"), ("one", "two")], nli, batch_size=2)
    assert probs.shape == (3, 3)
    assert np.allclose(probs.sum(axis=1), 1.0)
    config = AutoConfig.from_pretrained(nli.path)
    config.id2label = {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    relabelled = tmp_path / "nli"
    shutil.copytree(nli.path, relabelled)
    config.save_pretrained(relabelled)
    with pytest.raises(ValueError, match="do not include"):
        nli_probabilities([("a", "b")], dataclasses.replace(nli, path=str(relabelled)), batch_size=1)
