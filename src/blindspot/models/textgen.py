"""One text-generation interface, schema-constrained JSON output, two backends.

vLLM serves the paper's models on GPUs; transformers runs the same calls on tiny models on a CPU.
Both decode under the same JSON schema through xgrammar, without free whitespace between tokens (a
weak model otherwise pads JSON with whitespace until it runs out of tokens) and with the compact
separators "," and ":" (what vLLM's xgrammar backend uses without whitespace), so the two paths differ
in engine, not in what they emit: bench/compare.py shows their greedy texts equal. vLLM reads "no
whitespace" only from its engine's structured-output config, never from a request's parameters.
"""

from __future__ import annotations

import atexit
import json
import logging
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from blindspot.models.spec import ModelSpec

log = logging.getLogger(__name__)
JSON_SEPARATORS = (",", ":")
# The backend must be named: vLLM refuses `disable_any_whitespace` with its default "auto".
VLLM_STRUCTURED_OUTPUTS = {"backend": "xgrammar", "disable_any_whitespace": True}
Conversation = list[dict[str, str]]


class TextGenerator(Protocol):
    spec: ModelSpec

    def sampling(self) -> dict[str, Any]:
        """The sampling settings and seed, as recorded in every row."""

    def generate_json(self, conversations: Sequence[Conversation], json_schema: dict[str, Any]) -> list[str]:
        """One completion per conversation, constrained to `json_schema`."""


def _sampling(spec: ModelSpec, seed: int) -> dict[str, Any]:
    generation = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 256} | spec.generation
    return generation | {"seed": seed}


class TransformersTextGenerator:
    """A causal LM through transformers (AutoModelForCausalLM), built once per job."""

    def __init__(self, spec: ModelSpec, seed: int, batch_size: int = 8):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.spec, self.seed, self.batch_size = spec, seed, batch_size
        self.model = spec.pretrained(AutoModelForCausalLM)  # first: a job without its GPUs stops at once
        self.tokenizer = AutoTokenizer.from_pretrained(spec.path, **spec.files, padding_side="left")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.device = self.model.device
        self._compiled: dict[str, Any] = {}

    def sampling(self) -> dict[str, Any]:
        return _sampling(self.spec, self.seed)

    def _grammar(self, json_schema: dict[str, Any]) -> Any:
        import xgrammar as xgr

        # Property order is kept: the grammar makes the model write fields in schema order.
        key = json.dumps(json_schema)
        if key not in self._compiled:
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.model.config.vocab_size)
            self._compiled[key] = xgr.GrammarCompiler(info).compile_json_schema(
                key, any_whitespace=False, separators=JSON_SEPARATORS
            )
        return self._compiled[key]

    def generate_json(self, conversations: Sequence[Conversation], json_schema: dict[str, Any]) -> list[str]:
        import torch
        import xgrammar as xgr
        from transformers import set_seed

        grammar = self._grammar(json_schema)
        settings = self.sampling()
        sample = settings["temperature"] > 0
        texts: list[str] = []
        batches = range(0, len(conversations), self.batch_size)
        for batch_index, start in enumerate(tqdm(batches, desc=f"generate {self.spec.name}", unit="batch")):
            batch = conversations[start : start + self.batch_size]
            inputs = self.tokenizer.apply_chat_template(
                list(batch), add_generation_prompt=True, return_tensors="pt", return_dict=True, padding=True
            ).to(self.device)
            # Seeded per batch, so a batch's output does not depend on the batches before it.
            set_seed(self.seed + batch_index)
            with torch.inference_mode():
                output = self.model.generate(
                    **inputs,
                    max_new_tokens=settings["max_tokens"],
                    do_sample=sample,
                    temperature=settings["temperature"] if sample else None,
                    top_p=settings["top_p"] if sample else None,
                    top_k=None,
                    logits_processor=[xgr.contrib.hf.LogitsProcessor(grammar)],
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            new_tokens = output[:, inputs["input_ids"].shape[1] :]
            texts.extend(self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
        return texts


def vllm_engine(spec: ModelSpec, seed: int = 0, **overrides: Any) -> Any:
    """A vLLM engine for a registry entry: its GPUs are the tensor parallelism, and the entry's
    `engine_args` (memory share, multimodal limits) go last so the registry has the final word."""
    # `spec.device` stops a job that lacks the GPUs its model asks for before vLLM starts.
    log.info("starting vLLM for %s on %s", spec.name, spec.device)
    from vllm import LLM

    engine_args: dict[str, Any] = {
        "model": spec.path,
        "revision": spec.revision,
        "tensor_parallel_size": max(1, spec.gpus),
        "dtype": spec.dtype,
        "seed": seed,
        "trust_remote_code": spec.trust_remote_code,
    }
    if spec.max_model_len:
        engine_args["max_model_len"] = spec.max_model_len
    if spec.tokenizer_mode:
        engine_args["tokenizer_mode"] = spec.tokenizer_mode
    if spec.lora:  # one adapter, on every request (`lora_request`)
        engine_args |= {"enable_lora": True, "max_loras": 1, "max_lora_rank": spec.lora["max_rank"]}
    llm = LLM(**engine_args | overrides | spec.engine_args)
    # vLLM stops its engine process from weakref.finalize's exit hook. Where a finalizer was made before
    # multiprocessing was imported (a TemporaryDirectory: `steps.private_modules_cache`), that hook runs
    # after multiprocessing's, which waits forever for the engine process: the job never ends. Exit hooks
    # run last registered first, so this one, registered after vLLM (and multiprocessing) were imported,
    # runs before it. A weak reference: an engine dropped earlier is stopped by vLLM as it goes.
    client = weakref.ref(llm.llm_engine.engine_core)
    atexit.register(lambda: (engine := client()) is not None and engine.shutdown())
    return llm


def model_folder(spec: ModelSpec) -> Path:
    """The folder the model's files are in: its own for a built or local model, else its snapshot in the
    hub cache (`fetch-models` put it there)."""
    if Path(spec.path).is_dir():
        return Path(spec.path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(spec.path, revision=spec.revision, local_files_only=True))


def lora_request(spec: ModelSpec) -> Any:
    """The LoRA adapter that every request to the model carries, as vLLM takes it (`LoRARequest`), or
    None for a model without one: Phi-4-multimodal sees images only through its `vision-lora` folder,
    which vLLM applies per request, as vLLM's own Phi-4-multimodal example does."""
    if not spec.lora:
        return None
    from vllm.lora.request import LoRARequest

    return LoRARequest(spec.lora["name"], 1, str(model_folder(spec) / spec.lora["path"]))


class VLLMTextGenerator:
    def __init__(self, spec: ModelSpec, seed: int, batch_size: int = 0):
        del batch_size  # vLLM schedules its own batches
        self.spec = spec
        self.seed = seed
        self.llm = vllm_engine(spec, seed, structured_outputs_config=VLLM_STRUCTURED_OUTPUTS)
        self.lora = lora_request(spec)

    def sampling(self) -> dict[str, Any]:
        return _sampling(self.spec, self.seed)

    def generate_json(self, conversations: Sequence[Conversation], json_schema: dict[str, Any]) -> list[str]:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        settings = self.sampling()
        params = SamplingParams(
            temperature=settings["temperature"],
            top_p=settings["top_p"],
            max_tokens=settings["max_tokens"],
            seed=settings["seed"],
            structured_outputs=StructuredOutputsParams(json=json_schema),
        )
        outputs = self.llm.chat(list(conversations), params, use_tqdm=True, lora_request=self.lora)
        return [output.outputs[0].text for output in outputs]


GENERATORS: dict[str, Callable[..., TextGenerator]] = {
    "transformers": TransformersTextGenerator,
    "vllm": VLLMTextGenerator,
}


def load_text_generator(spec: ModelSpec, seed: int, batch_size: int) -> TextGenerator:
    """Build the engine once per job; the registry entry's backend picks the implementation."""
    log.info("loading %s (%s) from %s with the %s backend", spec.name, spec.model_id, spec.path, spec.backend)
    return GENERATORS[spec.backend](spec, seed=seed, batch_size=batch_size)
