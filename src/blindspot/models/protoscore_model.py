"""ProtoScore's model: a VLM with LoRA adapters on its language model's projections and a learned
scalar head on the last token's final hidden state, a pairwise image-text scorer s(T, I). Here are its
settings, how it is built (fresh or from a trained run), and a trained run's files (adapter and head):
written, read and hashed in one place. `protobias.protoscore` trains it; the plug-in
`metrics.protoscore` scores with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blindspot.models.vlm_scoring import image_question

HEAD_FILE = "score_head.safetensors"
ADAPTER_DIR = "adapter"
PROMPT = "Does this image show: {prompt}"


@dataclass(frozen=True)
class TrainSettings:
    """The model's and its training's settings (config `protoscore:`), saved beside a trained run's weights."""

    lora_r: int
    lora_alpha: int
    lora_dropout: float
    target_modules: tuple[str, ...]
    learning_rate: float
    weight_decay: float
    warmup_fraction: float
    max_grad_norm: float
    precision: str  # bf16 (frozen base in bf16, autocast) or fp32
    batch_size: int  # pairs per micro-batch
    accumulation: int  # micro-batches per optimizer step
    image_size: int
    max_text_tokens: int
    epochs: int
    margin: float
    heldout_fraction: float
    checkpoint_every: int  # optimizer steps
    seed: int

    @classmethod
    def from_config(cls, settings: Mapping[str, Any], seed: int) -> TrainSettings:
        values = {key: settings[key] for key in cls.__dataclass_fields__ if key != "seed"}
        return cls(**values | {"target_modules": tuple(settings["target_modules"]), "seed": seed})


class PairwiseScorer:
    """The VLM (with its LoRA adapters) and the scalar head; `scores` gives s(T, I) per (prompt, image)."""

    def __init__(self, model: Any, processor: Any, head: Any, settings: TrainSettings, device: Any, base: str):
        self.model, self.processor, self.head, self.settings, self.device = model, processor, head, settings, device
        self.base = base  # the base model's id@revision
        self.processor.tokenizer.padding_side = "left"  # the last position is every row's last token

    def prompt_text(self, prompt: str) -> str:
        """The prompt cut to `max_text_tokens` tokens, inside the fixed instruction."""
        tokenizer = self.processor.tokenizer
        ids = tokenizer.encode(prompt, add_special_tokens=False)[: self.settings.max_text_tokens]
        return PROMPT.format(prompt=tokenizer.decode(ids))

    def inputs(self, prompts: Sequence[str], images: Sequence[Any]) -> Any:
        size = (self.settings.image_size, self.settings.image_size)
        texts = [
            self.processor.apply_chat_template(image_question(self.prompt_text(p)), add_generation_prompt=True)
            for p in prompts
        ]
        pictures = [image.convert("RGB").resize(size) for image in images]
        return self.processor(text=texts, images=pictures, return_tensors="pt", padding=True).to(self.device)

    def scores(self, prompts: Sequence[str], images: Sequence[Any]) -> Any:
        import torch

        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.settings.precision == "bf16")
        with autocast:
            # the head reads hidden states: the vocabulary projection is made for the last position only
            output = self.model(**self.inputs(prompts, images), output_hidden_states=True, logits_to_keep=1)
            last = output.hidden_states[-1][:, -1]
        # The head runs in float32 outside autocast, which would run it in bf16 whatever its input: scores
        # of 8 significant bits tie pairs that differ, and a tie counts as the metric's failure.
        return self.head(last.float()).squeeze(-1)


def load_scorer(spec: Any, settings: TrainSettings, trained: str | Path | None = None) -> PairwiseScorer:
    """The base VLM from its registry entry with fresh LoRA adapters and head (seeded), or with the
    adapters and head of a trained run in `trained`."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText, AutoProcessor

    device_map = spec.device_map  # first: a job without the GPUs its model asks for stops before reading weights
    torch.manual_seed(settings.seed)
    remote = spec.trust_remote_code
    processor = AutoProcessor.from_pretrained(spec.path, revision=spec.revision, trust_remote_code=remote)
    # The frozen base loads straight onto its device in the training's precision (bf16 halves its memory);
    # what is trained, the LoRA adapters (peft's autocast_adapter_dtype) and the head, stays in float32.
    base = AutoModelForImageTextToText.from_pretrained(
        spec.path,
        revision=spec.revision,
        trust_remote_code=remote,
        device_map=device_map,
        dtype=torch.bfloat16 if settings.precision == "bf16" else torch.float32,
    )
    hidden = base.config.get_text_config().hidden_size
    head = torch.nn.Linear(hidden, 1)
    if trained is None:
        lora = LoraConfig(
            r=settings.lora_r,
            lora_alpha=settings.lora_alpha,
            lora_dropout=settings.lora_dropout,
            target_modules=list(settings.target_modules),
            bias="none",
        )
        model = get_peft_model(base, lora, autocast_adapter_dtype=True)
    else:
        model = PeftModel.from_pretrained(base, Path(trained) / ADAPTER_DIR, autocast_adapter_dtype=True)
        head.load_state_dict(load_file(Path(trained) / HEAD_FILE))
    device = base.device  # peft puts each adapter beside the weight it adapts
    return PairwiseScorer(model, processor, head.to(device), settings, device, base_model(spec))


def base_model(spec: Any) -> str:
    return f"{spec.model_id}@{spec.revision or ''}"


def save_trained(scorer: PairwiseScorer, folder: Path) -> None:
    from safetensors.torch import save_file

    scorer.model.save_pretrained(folder / ADAPTER_DIR)
    save_file({k: v.detach().cpu().contiguous() for k, v in scorer.head.state_dict().items()}, folder / HEAD_FILE)


def trained_sha256(folder: str | Path) -> str:
    """One hash of a trained scorer's weights (adapter and head), whatever else its folder holds."""
    import hashlib

    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted([folder / HEAD_FILE, *(folder / ADAPTER_DIR).glob("adapter_model.*")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
