"""A tiny Phi-4-multimodal (the real Phi4MMForCausalLM architecture, random weights: `random_phi4_multimodal`)
through vLLM's CPU build, its vision LoRA on every request: the VLLMVLMScorer answers a HumbleBench-style
question about an image. Not in config/tiny.yaml: vLLM builds Phi-4's SigLIP vision tower at full size (0.8 GB),
which every session's `built_config` would build."""

import json
import subprocess

import pytest
from helpers.envs import VLLM_PYTHON
from helpers.workflow import REPO

from blindspot.models.spec import model_spec
from blindspot.tiny.build import build_model

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ANSWER_IN_VLLM = """
import json, sys
from PIL import Image
from blindspot.humblebench.answers import option_token_ids
from blindspot.models.spec import ModelSpec
from blindspot.models.vlm_scoring import image_question, load_vlm_scorer
if __name__ == "__main__":
    spec = ModelSpec(**json.loads(sys.argv[1]))
    scorer = load_vlm_scorer(spec, batch_size=2)
    question = "What is in the image?\\nA. a cat\\nB. a dog\\nC. a car\\nD. a tree\\nE. None of the above"
    letters = option_token_ids(scorer.tokenizer)
    answers = scorer.choose([image_question(question)], [Image.new("RGB", (64, 48), (200, 30, 30))], letters, 4)
    print(json.dumps({"answers": answers, "lora": [scorer.lora.lora_name, scorer.lora.lora_path]}))
"""


def test_tiny_phi4_multimodal_answers_through_vllm_with_its_vision_lora(built_config, tmp_path):
    if not VLLM_PYTHON.exists():
        pytest.fail(f"{VLLM_PYTHON} is missing: run ./setup.sh --vllm (or deselect with -m 'not vllm')")
    folder = tmp_path / "tiny-phi-4-multimodal"
    tokenizer = model_spec(built_config, "smollm2-135m").path
    build_model(folder, {"recipe": "random_phi4_multimodal", "tokenizer_from": tokenizer}, built_config["seed"])
    assert json.loads((folder / "vision-lora" / "adapter_config.json").read_text())["peft_type"] == "LORA"
    # No audio (the tiny processor takes none), one 448-px crop and eager mode keep the CPU run to about 90 s.
    spec = {
        "name": "tiny-phi-4-multimodal",
        "backend": "vllm",
        "gpus": 0,
        "dtype": "bfloat16",
        "path": str(folder),
        "built": True,
        "trust_remote_code": True,
        "max_model_len": 2048,
        "lora": {"name": "vision", "path": "vision-lora", "max_rank": 8},
        "engine_args": {
            "limit_mm_per_prompt": {"image": 1, "audio": 0},
            "mm_processor_kwargs": {"dynamic_hd": 1},
            "enforce_eager": True,
            "gpu_memory_utilization": 0.25,
            "max_num_batched_tokens": 2048,
        },
    }
    result = subprocess.run(
        [str(VLLM_PYTHON), "-c", ANSWER_IN_VLLM, json.dumps(spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    # vLLM logs its shutdown to stdout after the answer
    served = json.loads(next(line for line in reversed(result.stdout.splitlines()) if line.startswith("{")))
    assert served["lora"] == ["vision", str(folder / "vision-lora")]
    ((probabilities, text, stopped),) = served["answers"]
    assert len(probabilities) == 5
    assert all(0 < p < 1 for p in probabilities)
    assert isinstance(text, str)
    assert isinstance(stopped, bool)
