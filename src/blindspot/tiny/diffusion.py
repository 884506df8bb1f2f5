"""Tiny text-to-image pipelines of the real architectures (FLUX, SD3.5, Sana), random weights.

Text encoders and tokenizers are the real classes (CLIP, T5, Gemma2) with small character-level
vocabularies built deterministically, so the pipelines tokenize and encode prompts the way the
real ones do, only with fewer parameters.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

_CHARS = list(string.ascii_lowercase + string.digits + ".,'-+!?")


def _clip_tokenizer() -> Any:
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for suffix in ("", "</w>"):
        vocab |= {char + suffix: len(vocab) + i for i, char in enumerate(_CHARS)}
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)


def _t5_tokenizer() -> Any:
    from transformers import T5Tokenizer

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -1.0)]
    pieces += [(char, -2.0) for char in _CHARS] + [("▁" + char, -3.0) for char in _CHARS]
    return T5Tokenizer(vocab=pieces, extra_ids=0)


def _gemma_tokenizer() -> Any:
    from transformers import GemmaTokenizer

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4, "▁": 5}
    for prefix in ("", "▁"):
        vocab |= {prefix + char: len(vocab) + i for i, char in enumerate(_CHARS)}
    return GemmaTokenizer(vocab=vocab, merges=[])


def _clip_encoder(tokenizer: Any, cls: Any, hidden: int, projection: int) -> Any:
    from transformers import CLIPTextConfig

    config = CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        projection_dim=projection,
        max_position_embeddings=77,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    return cls(config).eval()


def _t5_encoder(tokenizer: Any, d_model: int) -> Any:
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=d_model,
        d_ff=2 * d_model,
        d_kv=8,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
    )
    return T5EncoderModel(config).eval()


def _vae_kl() -> Any:
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 2,
        up_block_types=["UpDecoderBlock2D"] * 2,
        block_out_channels=[8, 16],
        latent_channels=4,
        norm_num_groups=8,
        use_quant_conv=False,
        use_post_quant_conv=False,
        shift_factor=0.0609,
        scaling_factor=1.5035,
    ).eval()


def flux() -> Any:
    """FLUX.1: MMDiT with RoPE; in_channels = 4 x VAE latent channels, RoPE axes sum to the head dim."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel

    clip, t5 = _clip_tokenizer(), _t5_tokenizer()
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        axes_dims_rope=[4, 4, 8],
    ).eval()
    return FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=_vae_kl(),
        text_encoder=_clip_encoder(clip, CLIPTextModel, 32, 32),
        tokenizer=clip,
        text_encoder_2=_t5_encoder(t5, 32),
        tokenizer_2=t5,
        transformer=transformer,
    )


def sd3() -> Any:
    """SD3.5: MMDiT with qk RMSNorm and dual attention; two CLIP encoders and T5."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextModelWithProjection

    clip, clip_2, t5 = _clip_tokenizer(), _clip_tokenizer(), _t5_tokenizer()
    transformer = SD3Transformer2DModel(
        sample_size=32,
        patch_size=1,
        in_channels=4,
        out_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=4,
        joint_attention_dim=32,
        caption_projection_dim=32,
        pooled_projection_dim=64,
        pos_embed_max_size=192,
        dual_attention_layers=(0,),
        qk_norm="rms_norm",
    ).eval()
    return StableDiffusion3Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=_vae_kl(),
        text_encoder=_clip_encoder(clip, CLIPTextModelWithProjection, 16, 32),
        tokenizer=clip,
        text_encoder_2=_clip_encoder(clip_2, CLIPTextModelWithProjection, 16, 32),
        tokenizer_2=clip_2,
        text_encoder_3=_t5_encoder(t5, 32),
        tokenizer_3=t5,
        transformer=transformer,
    )


def sana() -> Any:
    """Sana: linear-attention DiT, deep-compression autoencoder, Gemma2 text encoder."""
    from diffusers import AutoencoderDC, FlowMatchEulerDiscreteScheduler, SanaPipeline, SanaTransformer2DModel
    from transformers import Gemma2Config, Gemma2Model

    tokenizer = _gemma_tokenizer()
    text_encoder = Gemma2Model(
        Gemma2Config(
            vocab_size=len(tokenizer),
            hidden_size=8,
            intermediate_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=4,
            max_position_embeddings=8192,
            pad_token_id=0,
            bos_token_id=2,
            eos_token_id=1,
        )
    ).eval()
    vae = AutoencoderDC(
        in_channels=3,
        latent_channels=4,
        attention_head_dim=2,
        encoder_block_types=("ResBlock", "EfficientViTBlock"),
        decoder_block_types=("ResBlock", "EfficientViTBlock"),
        encoder_block_out_channels=(8, 8),
        decoder_block_out_channels=(8, 8),
        encoder_qkv_multiscales=((), (5,)),
        decoder_qkv_multiscales=((), (5,)),
        encoder_layers_per_block=(1, 1),
        decoder_layers_per_block=(1, 1),
        upsample_block_type="interpolate",
        downsample_block_type="stride_conv",
        decoder_norm_types="rms_norm",
        decoder_act_fns="silu",
        scaling_factor=0.41407,
    ).eval()
    transformer = SanaTransformer2DModel(
        patch_size=1,
        in_channels=4,
        out_channels=4,
        num_layers=1,
        num_attention_heads=2,
        attention_head_dim=4,
        num_cross_attention_heads=2,
        cross_attention_head_dim=4,
        cross_attention_dim=8,
        caption_channels=8,
        sample_size=32,
    ).eval()
    return SanaPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
    )


ARCHITECTURES: dict[str, Callable[[], Any]] = {"flux": flux, "sd3": sd3, "sana": sana}


def build_random_diffusers_pipeline(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """A text-to-image pipeline of a real architecture (`architecture`: flux, sd3, sana), random weights."""
    import torch

    torch.manual_seed(seed)
    ARCHITECTURES[recipe["architecture"]]().save_pretrained(out)
