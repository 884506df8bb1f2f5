"""A registry entry's `lora` (Phi-4-multimodal's vision adapter): the vLLM engine starts with LoRA enabled,
and every request of the VLM scorer carries the adapter. vLLM itself is faked here (a recording stand-in for
`vllm.LLM`); tests/models/test_vllm_phi4mm.py runs a tiny Phi-4-multimodal through the real vLLM CPU build."""

import dataclasses
import sys
import types

import pytest

from blindspot.hub.repos import hub_models
from blindspot.models.spec import model_spec
from blindspot.models.textgen import lora_request, vllm_engine
from blindspot.models.vlm_scoring import VLLMVLMScorer, image_question

PHI4 = "phi-4-multimodal-instruct"


class FakeTokenizer:
    def encode(self, text, add_special_tokens=False):
        return [ord(character) for character in text]  # "10" is two tokens, as in a Qwen-style tokenizer


class EngineCore:
    def shutdown(self):
        pass


class FakeLLM:
    """Records the engine's arguments and every chat call; answers "1" with its candidates' log-probabilities."""

    def __init__(self, **engine_args):
        self.engine_args, self.calls = engine_args, []
        self.llm_engine = types.SimpleNamespace(engine_core=EngineCore())

    def get_tokenizer(self):
        return FakeTokenizer()

    def chat(self, messages, params, **kwargs):
        self.calls.append(kwargs)
        params = params[0] if isinstance(params, list) else params  # one per request, or one for all
        logprobs = {token: types.SimpleNamespace(logprob=-1.0) for token in params.logprob_token_ids}
        output = types.SimpleNamespace(text="1", logprobs=[logprobs], finish_reason="stop")
        return [types.SimpleNamespace(outputs=[output], prompt_token_ids=[ord("1")]) for _ in messages]


@pytest.fixture
def fake_vllm(monkeypatch):
    class LoRARequest(types.SimpleNamespace):
        def __init__(self, lora_name, lora_int_id, lora_path):
            super().__init__(lora_name=lora_name, lora_int_id=lora_int_id, lora_path=lora_path)

    vllm = types.ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = lambda **settings: types.SimpleNamespace(**settings)
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    for name, module in {"vllm": vllm, "vllm.lora": lora, "vllm.lora.request": request}.items():
        monkeypatch.setitem(sys.modules, name, module)
    return vllm


def local_phi4(paper_config, tmp_path):
    """The paper's Phi-4-multimodal entry, its repository in a local folder (no hub cache here)."""
    (tmp_path / "vision-lora").mkdir()
    return dataclasses.replace(model_spec(paper_config | {"allow_cpu": True}, PHI4), path=str(tmp_path))


def test_the_engine_starts_with_lora_and_every_request_carries_the_adapter(fake_vllm, paper_config, tmp_path):
    spec = local_phi4(paper_config, tmp_path)
    scorer = VLLMVLMScorer(spec, batch_size=2)
    engine = scorer.llm.engine_args
    assert engine["enable_lora"] is True
    assert engine["max_loras"] == 1
    assert engine["max_lora_rank"] == 320  # vLLM's example: the speech adapter's rank, above the vision one's
    assert engine["trust_remote_code"] is True
    assert engine["max_model_len"] == 5120
    assert engine["limit_mm_per_prompt"] == {"image": 1}
    assert engine["mm_processor_kwargs"] == {"dynamic_hd": 16}

    conversations = [image_question("What is in the image?")] * 2
    scorer.choose(conversations, ["image", "image"], [ord(letter) for letter in "ABCDE"], 4)
    scorer.score(conversations, ["image", "image"])
    assert len(scorer.llm.calls) == 3  # choose's answer; score's answer and its continuation after "1"
    vision = ("vision", 1, str(tmp_path / "vision-lora"))
    for call in scorer.llm.calls:
        adapter = call["lora_request"]
        assert (adapter.lora_name, adapter.lora_int_id, adapter.lora_path) == vision


def test_a_model_without_an_adapter_starts_and_asks_without_lora(fake_vllm, paper_config):
    spec = model_spec(paper_config | {"allow_cpu": True}, "molmo-7b-d")
    assert lora_request(spec) is None
    llm = vllm_engine(spec)
    assert not {"enable_lora", "max_lora_rank", "max_loras"} & set(llm.engine_args)


def test_the_adapter_keys_the_results_and_is_fetched_with_the_model(paper_config):
    spec = model_spec(paper_config, PHI4)
    assert spec.outputs["lora"] == {"name": "vision", "path": "vision-lora", "max_rank": 320}
    (phi4,) = [model for model in hub_models(paper_config) if PHI4 in model.names]
    assert phi4.files == ("vision-lora/adapter_config.json", "vision-lora/adapter_model.safetensors")
    assert phi4.layout is not None  # its model folder too: configs, remote code and weights
