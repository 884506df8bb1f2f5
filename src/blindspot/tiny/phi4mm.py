"""A tiny Phi-4-multimodal-instruct (Phi4MMForCausalLM, vLLM's `phi4mm`) with random weights, in the
checkpoint's original layout that vLLM reads: a Phi-3-style language model (tiny), the SigLIP-so400m vision
tower, which vLLM builds at its full size whatever the config says (26 layers of 1,152: 0.8 GB in bfloat16),
a tiny conformer audio encoder, its remote-code config and processor (`phi4mm_remote`, written here), and a
`vision-lora` folder of random LoRA weights in PEFT's format, which vLLM applies per request.

The audio encoder's tensor names and shapes (`phi4mm_remote/audio_shapes.json`) are those vLLM 0.32's
`phi4mm_audio.AudioEmbedding` builds for the tiny conformer below; the tokenizer is SmolLM2's byte-level BPE,
its vocabulary filled to Phi-4's 200,064 ids with Phi-4's special tokens at their ids (`<|endoftext10|>`,
200010, is vLLM's image placeholder)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REMOTE = Path(__file__).with_name("phi4mm_remote")
VOCAB = 200064
SPECIAL = {"<|endoftext|>": 199999, **{f"<|endoftext{k}|>": 200000 + k for k in range(19)}} | {
    name: 200019 + i
    for i, name in enumerate(["<|assistant|>", "<|end|>", "<|user|>", "<|system|>", "<|tool|>", "<|/tool|>"])
}
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)
# Phi-4's head size (128): vLLM's CPU attention runs none below 32.
TEXT = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1}  # fmt: skip
CONFORMER = {
    "activation": "swish", "activation_checkpointing": {"interval": 1, "module": "transformer", "offload": False},
    "attention_dim": 32, "attention_heads": 2, "batch_norm": False, "bias_in_glu": True, "causal": True,
    "chunk_size": -1, "cnn_layer_norm": True, "conv_activation": "swish", "conv_glu_type": "swish",
    "depthwise_multiplier": 1, "depthwise_seperable_out_channel": 32, "dropout_rate": 0.0,
    "encoder_embedding_config": {"input_size": 80}, "ext_pw_kernel_size": 1, "ext_pw_out_channel": 32,
    "input_layer": "nemo_conv", "input_size": 80, "kernel_size": 3, "left_chunk": 18, "linear_units": 64,
    "nemo_conv_settings": {"conv_channels": 32}, "num_blocks": 1,
    "relative_attention_bias_args": {"t5_bias_max_distance": 500, "type": "t5"}, "time_reduction": 8,
}  # fmt: skip
SIGLIP = {"hidden": 1152, "mlp": 4304, "layers": 26, "positions": 1024}  # vLLM's get_navit_vision_model, layer -2
VISION_LORA_LAYERS = r"layers.*((self_attn\.(qkv_proj|o_proj))|(mlp\.(gate_up_proj|down_proj)))"
SPEECH_LORA_LAYERS = r"((layers.*self_attn\.(qkv|o)_proj)|(layers.*mlp\.(gate_up|down)_proj))"
LORA_MODULES = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


def _tokenizer(source: str | Path) -> Any:
    """SmolLM2's merges, its vocabulary filled to 200,064 ids, Phi-4's special tokens at their ids."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads((Path(source) / "tokenizer.json").read_text())
    vocab = {token: i for token, i in spec["model"]["vocab"].items() if token not in dict.fromkeys(
        t["content"] for t in spec["added_tokens"])}  # fmt: skip
    vocab = dict(sorted(vocab.items(), key=lambda item: item[1]))
    vocab = {token: i for i, token in enumerate(vocab)}
    filler = (f"<|reserved_{i}|>" for i in range(VOCAB))
    while len(vocab) < VOCAB:
        vocab.setdefault(next(filler), len(vocab))
    named = {token: vocab.pop(token) for token in [t for t, i in vocab.items() if i in SPECIAL.values()]}
    for token, index in SPECIAL.items():
        vocab[token] = index
    del named
    spec["model"]["vocab"] = vocab
    spec["added_tokens"] = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True} for t, i in SPECIAL.items()
    ]  # fmt: skip
    spec["post_processor"] = None
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _layer_shapes() -> dict[str, tuple[int, int]]:
    """Each decoder layer's projections (`LORA_MODULES`) and their weights' shapes."""
    hidden, heads, kv = TEXT["hidden_size"], TEXT["num_attention_heads"], TEXT["num_key_value_heads"]
    head = hidden // heads
    return {
        "self_attn.qkv_proj": ((heads + 2 * kv) * head, hidden),
        "self_attn.o_proj": (hidden, hidden),
        "mlp.gate_up_proj": (2 * TEXT["intermediate_size"], hidden),
        "mlp.down_proj": (hidden, TEXT["intermediate_size"]),
    }


def _weights(seed: int) -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    weights: dict[str, Any] = {}

    def add(name: str, *shape: int) -> None:
        last = name.rsplit(".", 1)[-1]
        if last == "bias" or name.endswith("global_mean"):
            weights[name] = torch.zeros(shape)
        elif ("norm" in name and last == "weight" and len(shape) == 1) or name.endswith("global_invstd"):
            weights[name] = torch.ones(shape)
        else:
            weights[name] = torch.randn(shape, generator=generator) * 0.02

    hidden, shapes = TEXT["hidden_size"], _layer_shapes()
    add("model.embed_tokens.weight", VOCAB, hidden)
    add("model.norm.weight", hidden)
    for layer in range(TEXT["num_hidden_layers"]):
        prefix = f"model.layers.{layer}"
        add(f"{prefix}.input_layernorm.weight", hidden)
        add(f"{prefix}.post_attention_layernorm.weight", hidden)
        for module, (out, into) in shapes.items():
            add(f"{prefix}.{module}.base_layer.weight", out, into)  # the checkpoint keeps its LoRAs inline too
            for adapter in ("vision", "speech"):
                add(f"{prefix}.{module}.lora_A.{adapter}.weight", 8, into)
                add(f"{prefix}.{module}.lora_B.{adapter}.weight", out, 8)
    vision, width = "model.embed_tokens_extend.image_embed.", SIGLIP["hidden"]
    add(f"{vision}img_processor.embeddings.patch_embedding.weight", width, 3, 14, 14)
    add(f"{vision}img_processor.embeddings.patch_embedding.bias", width)
    add(f"{vision}img_processor.embeddings.position_embedding.weight", SIGLIP["positions"], width)
    for layer in range(SIGLIP["layers"]):
        prefix = f"{vision}img_processor.encoder.layers.{layer}"
        for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
            add(f"{prefix}.self_attn.{projection}.weight", width, width)
            add(f"{prefix}.self_attn.{projection}.bias", width)
        for norm in ("layer_norm1", "layer_norm2"):
            add(f"{prefix}.{norm}.weight", width)
            add(f"{prefix}.{norm}.bias", width)
        add(f"{prefix}.mlp.fc1.weight", SIGLIP["mlp"], width)
        add(f"{prefix}.mlp.fc1.bias", SIGLIP["mlp"])
        add(f"{prefix}.mlp.fc2.weight", width, SIGLIP["mlp"])
        add(f"{prefix}.mlp.fc2.bias", width)
    add(f"{vision}glb_GN", 1, 1, width)
    add(f"{vision}sub_GN", 1, 1, 1, width)
    add(f"{vision}img_projection.0.weight", hidden, width)
    add(f"{vision}img_projection.0.bias", hidden)
    add(f"{vision}img_projection.2.weight", hidden, hidden)
    add(f"{vision}img_projection.2.bias", hidden)
    audio = "model.embed_tokens_extend.audio_embed."
    for name, shape in json.loads((REMOTE / "audio_shapes.json").read_text()).items():
        name = name.replace("audio_projection_for_vision.", "audio_projection.vision.")
        name = name.replace("audio_projection.0", "audio_projection.speech.0").replace(
            "audio_projection.2", "audio_projection.speech.2"
        )
        add(audio + name, *shape)
    return weights


def _vision_lora(out: Path, seed: int, rank: int = 8) -> None:
    """Random LoRA weights of the vision adapter's modules and shapes, in PEFT's format (the checkpoint's
    `vision-lora`: rank 256, alpha 512; the tiny one rank 8, alpha 16)."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed + 1)
    shapes = _layer_shapes()
    tensors = {}
    for layer in range(TEXT["num_hidden_layers"]):
        for module, (rows, cols) in shapes.items():
            name = f"base_model.model.model.layers.{layer}.{module}"
            tensors[f"{name}.lora_A.weight"] = torch.randn(rank, cols, generator=generator) * 0.02
            tensors[f"{name}.lora_B.weight"] = torch.randn(rows, rank, generator=generator) * 0.02
    out.mkdir()
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}, out / "adapter_model.safetensors")
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": [module.split(".")[-1] for module in LORA_MODULES],
        "base_model_name_or_path": None,
        "inference_mode": True,
    }
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))


def build_random_phi4_multimodal(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """The tiny Phi-4-multimodal (see the module's docstring) with its `vision-lora` adapter."""
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    tokenizer = _tokenizer(recipe["tokenizer_from"])
    tokenizer.save_pretrained(out)
    for name in ("configuration_phi4mm.py", "processing_phi4mm.py"):
        shutil.copy(REMOTE / name, out / name)
    config = {
        "architectures": ["Phi4MMForCausalLM"],
        "model_type": "phi4mm",
        "auto_map": {"AutoConfig": "configuration_phi4mm.Phi4MMConfig"},
        "vocab_size": VOCAB,
        **TEXT,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "original_max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.75,
        "tie_word_embeddings": True,
        "bos_token_id": SPECIAL["<|endoftext|>"],
        "eos_token_id": SPECIAL["<|endoftext|>"],
        "pad_token_id": SPECIAL["<|endoftext|>"],
        "torch_dtype": "bfloat16",
        "img_processor": None,
        "audio_processor": {"name": "cascades", "config": CONFORMER},
        "embd_layer": {
            "embedding_cls": "image_audio",
            "image_embd_layer": {
                "crop_size": 448,
                "embedding_cls": "tune_image",
                "hd_transform_order": "sub_glb",
                "image_token_compression_cls": "avg_pool_2d",
                "projection_cls": "mlp",
                "use_hd_transform": True,
                "with_learnable_separator": True,
            },
            "audio_embd_layer": {
                "compression_rate": 8,
                "downsample_rate": 1,
                "embedding_cls": "audio",
                "projection_cls": "mlp",
                "use_conv_downsample": False,
                "use_qformer": False,
            },
        },
        "vision_lora": {"r": 8, "lora_alpha": 16, "dp": 0.0, "layer": VISION_LORA_LAYERS},
        "speech_lora": {"r": 8, "lora_alpha": 16, "dp": 0.0, "layer": SPEECH_LORA_LAYERS},
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 199999, "eos_token_id": [SPECIAL["<|end|>"], 199999], "pad_token_id": 199999})
    )
    (out / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "auto_map": {"AutoProcessor": "processing_phi4mm.Phi4MMProcessor"},
                "processor_class": "Phi4MMProcessor",
                "dynamic_hd": 36,
                "audio_compression_rate": 8,
                "audio_downsample_rate": 1,
                "audio_feat_stride": 1,
            },
            indent=2,
        )
    )
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in _weights(seed).items()}, out / "model.safetensors")
    _vision_lora(out / "vision-lora", seed)
