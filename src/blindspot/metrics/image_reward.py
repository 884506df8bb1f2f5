"""ImageReward (Xu et al., NeurIPS 2023): BLIP fine-tuned on human preference rankings of
text-to-image outputs, ported from the official `image-reward` package (1.5) onto transformers' BLIP.

The official model (`ImageReward.ImageReward`) is LAVIS/BLIP's `BLIP_Pretrain` (a ViT-L/16 image
encoder at 224 px and BLIP's `med.py` BERT-base text encoder whose every layer cross-attends to the
image) plus an MLP head. For a (prompt, image) pair it runs the text encoder on the prompt with the
image's patch features as cross-attention keys, takes the [CLS] output, and returns
`(mlp(cls) - MEAN) / STD` with the release's constants: a z-scored reward, per pair.

The port runs the same computation on the maintained library: transformers' `BlipVisionModel` (the
same ViT: one qkv projection, pre-norm blocks, a final LayerNorm) and `BlipTextModel` (transformers'
own port of `med.py`; a config with `is_decoder=True` builds the cross-attention layers, and the
forward pass with `is_decoder=False`, the default, is the bidirectional "multimodal" mode the official
scorer uses). `PORT_TO_OFFICIAL` maps every weight of the port to its key in the release file
`ImageReward.pt`; loading refuses a checkpoint with a key missing or left over, except the
`UNUSED_KEYS` the scorer never reads (BLIP's ITC projections, and a buffer of position ids).
`tests/metrics/test_image_reward.py` proves the port equal to the official package within 1e-4 (run in a
separate environment with its old pins: `requirements/ports.txt`).

Preprocessing and tokenisation are the official ones: torchvision's resize of the short side to 224
(bicubic), centre crop, CLIP's normalisation; bert-base-uncased (with BLIP's added `[DEC]` and
`[ENC]`), padded to and truncated at 35 tokens.

Bounds: the z-scored reward is unbounded; (-3, 3), three standard deviations of the reward over the
release's calibration set either side of its mean, is the range `normalise` maps to [0, 1].
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blindspot.models.checkpoints import find_checkpoint, load_mapped_state_dict
from blindspot.models.spec import ModelSpec
from blindspot.plugins import HubFiles, Score, batches

SCORE_VERSION = 1  # bumped when a change alters its scores (`plugin_code`)

# The checkpoint file in the `THUDM/ImageReward` hub repository, when the registry entry gives the hub id.
HUB_CHECKPOINT = "ImageReward.pt"
# The release's checkpoint, and its tokenizer's repository (`hub.repos`).
HUB_FILES = HubFiles(checkpoint=HUB_CHECKPOINT, repo_args={"tokenizer": False})
# A tiny model's sizes, read from the checkpoint's folder; without it the release's sizes hold.
SIZES_FILE = "image_reward.json"
# `ImageReward.__init__`: the reward's mean and standard deviation, which the score is z-scored with.
MEAN, STD = 0.16717362830052426, 1.0333394966054072
MAX_LENGTH = 35  # the official tokenizer call: padding="max_length", truncation=True, max_length=35
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
BOUNDS = (-3.0, 3.0)
# The release: BLIP_Pretrain(image_size=224, vit="large") and BLIP's med_config.json (BERT-base with
# cross-attention; 30,522 WordPiece tokens plus [DEC] and [ENC]).
RELEASE_SIZES: dict[str, int] = {
    "image_size": 224,
    "patch_size": 16,
    "vision_width": 1024,
    "vision_layers": 24,
    "vision_heads": 16,
    "vision_mlp": 4096,
    "text_width": 768,
    "text_layers": 12,
    "text_heads": 12,
    "text_mlp": 3072,
    "vocab_size": 30524,
    "max_positions": 512,
}
HEAD_WIDTHS = (1024, 128, 64, 16, 1)  # ImageReward's MLP: linear layers only (its ReLUs are commented out)
HEAD_DROPOUTS = (0.2, 0.2, 0.1, 0.0, 0.0)  # after each linear layer (none after the last two)
PROJECTION_WIDTH = 256  # BLIP_Pretrain's embed_dim: the ITC projections, which the reward does not use

# Each port weight's key in ImageReward.pt (first full match wins). transformers' BlipText is a port of
# LAVIS's med.py and keeps its names; the vision tower and the head are renamed.
_V, _B = r"vision\.encoder\.layers\.(\d+)\.", r"blip.visual_encoder.blocks.\1."
_WB, _T = r"\.(?:weight|bias))", r"blip.text_encoder.\1"
PORT_TO_OFFICIAL: tuple[tuple[str, str], ...] = (
    (r"vision\.embeddings\.class_embedding", "blip.visual_encoder.cls_token"),
    (r"vision\.embeddings\.position_embedding", "blip.visual_encoder.pos_embed"),
    (r"vision\.embeddings\.patch_embedding\.(weight|bias)", r"blip.visual_encoder.patch_embed.proj.\1"),
    (_V + r"layer_norm1\.(weight|bias)", _B + r"norm1.\2"),
    (_V + r"self_attn\.qkv\.(weight|bias)", _B + r"attn.qkv.\2"),
    (_V + r"self_attn\.projection\.(weight|bias)", _B + r"attn.proj.\2"),
    (_V + r"layer_norm2\.(weight|bias)", _B + r"norm2.\2"),
    (_V + r"mlp\.(fc1|fc2)\.(weight|bias)", _B + r"mlp.\2.\3"),
    (r"vision\.post_layernorm\.(weight|bias)", r"blip.visual_encoder.norm.\1"),
    (r"text\.(embeddings\.(?:word_embeddings|position_embeddings|LayerNorm)" + _WB, _T),
    (r"text\.(encoder\.layer\.\d+\.(?:attention|crossattention)\.self\.(?:query|key|value)" + _WB, _T),
    (r"text\.(encoder\.layer\.\d+\.(?:attention|crossattention)\.output\.(?:dense|LayerNorm)" + _WB, _T),
    (r"text\.(encoder\.layer\.\d+\.(?:intermediate\.dense|output\.(?:dense|LayerNorm))" + _WB, _T),
    (r"head\.(\d+)\.(weight|bias)", r"mlp.layers.\1.\2"),
)
# Keys of ImageReward.pt that the reward never reads: BLIP's ITC projections, and med.py's position-id
# buffer (0, 1, 2, ...), which transformers rebuilds itself.
UNUSED_KEYS = (
    "blip.vision_proj.weight",
    "blip.vision_proj.bias",
    "blip.text_proj.weight",
    "blip.text_proj.bias",
    "blip.text_encoder.embeddings.position_ids",
)


def official_key(port_key: str) -> str:
    """The key in ImageReward.pt of a port weight; an unmapped name is an error, never a guess."""
    for pattern, replacement in PORT_TO_OFFICIAL:
        if re.fullmatch(pattern, port_key):
            return re.sub(pattern, replacement, port_key)
    raise KeyError(f"no ImageReward.pt key is mapped to the port's weight '{port_key}'")


def read_sizes(folder: Path) -> dict[str, int]:
    """The model's sizes: the release's, overridden by `image_reward.json` in `folder` (a tiny model)."""
    file = folder / SIZES_FILE
    sizes = json.loads(file.read_text()) if file.is_file() else {}
    unknown = sorted(set(sizes) - set(RELEASE_SIZES))
    if unknown:
        raise ValueError(f"{file}: unknown size(s) {', '.join(unknown)}; known: {', '.join(RELEASE_SIZES)}")
    return RELEASE_SIZES | sizes


def build_model(sizes: Mapping[str, int]) -> Any:
    """The port at the given sizes, with transformers' initial weights (loading replaces them all)."""
    from torch import nn
    from transformers import BlipTextConfig, BlipTextModel, BlipVisionConfig, BlipVisionModel

    vision = BlipVisionConfig(
        hidden_size=sizes["vision_width"],
        intermediate_size=sizes["vision_mlp"],
        num_hidden_layers=sizes["vision_layers"],
        num_attention_heads=sizes["vision_heads"],
        image_size=sizes["image_size"],
        patch_size=sizes["patch_size"],
        hidden_act="gelu",
        layer_norm_eps=1e-6,  # timm's ViT: exact GELU, LayerNorm eps 1e-6
    )
    text = BlipTextConfig(
        vocab_size=sizes["vocab_size"],
        hidden_size=sizes["text_width"],
        intermediate_size=sizes["text_mlp"],
        num_hidden_layers=sizes["text_layers"],
        num_attention_heads=sizes["text_heads"],
        max_position_embeddings=sizes["max_positions"],
        encoder_hidden_size=sizes["vision_width"],
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        pad_token_id=0,  # med_config.json
        is_decoder=True,  # builds the cross-attention layers; the forward pass stays bidirectional
    )
    widths = (sizes["text_width"], *HEAD_WIDTHS)
    layers: list[nn.Module] = []
    for width_in, width_out, dropout in zip(widths[:-1], widths[1:], HEAD_DROPOUTS, strict=True):
        layers.append(nn.Linear(width_in, width_out))
        if dropout:  # kept so that the Sequential's indices are the official ones (0, 2, 4, 6, 7)
            layers.append(nn.Dropout(dropout))
    model = nn.Module()
    model.vision = BlipVisionModel(vision)
    model.text = BlipTextModel(text, add_pooling_layer=False)
    model.head = nn.Sequential(*layers)
    return model


def load_official_state_dict(model: Any, state_dict: Mapping[str, Any], source: str | Path) -> None:
    """Load ImageReward.pt's weights into the port: every port weight from its official key, and no
    official key left over but the `UNUSED_KEYS`; anything else is an error that names the keys."""
    wanted = {name: official_key(name) for name in model.state_dict()}
    # strict: the port's own names must all be filled (load_state_dict also checks every shape)
    load_mapped_state_dict(model, state_dict, wanted, UNUSED_KEYS, "ImageReward", source, strict=True)


def load_tokenizer(source: str | Path | None) -> Any:
    """bert-base-uncased's tokenizer with BLIP's `[DEC]` and `[ENC]` (`init_tokenizer`): from a folder or
    hub id holding a BERT tokenizer, or (None) from the vocabulary file an installed package ships."""
    if source is None:
        from blindspot.models.tokenizers import bert_uncased_tokenizer

        tokenizer = bert_uncased_tokenizer()
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(source))
    if "[DEC]" not in tokenizer.get_vocab():
        tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    if "[ENC]" not in tokenizer.get_vocab():
        tokenizer.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
    return tokenizer


def official_transform(size: int) -> Any:
    """ImageReward's `_transform`: short side to `size` (bicubic), centre crop, RGB, CLIP's normalisation."""
    from torchvision.transforms import CenterCrop, Compose, InterpolationMode, Normalize, Resize, ToTensor

    return Compose(
        [
            Resize(size, interpolation=InterpolationMode.BICUBIC),
            CenterCrop(size),
            lambda image: image.convert("RGB"),
            ToTensor(),
            Normalize(CLIP_MEAN, CLIP_STD),
        ]
    )


class ImageReward:
    def __init__(
        self, spec: ModelSpec, batch_size: int, checkpoint: str = HUB_CHECKPOINT, tokenizer: str | None = None
    ):
        """`spec.path` is the checkpoint file, a folder holding `checkpoint` (a tiny model's folder also
        holds its sizes and tokenizer), or the hub id `THUDM/ImageReward`, whose `checkpoint` must be in
        the local hub cache. `tokenizer` is a folder or hub id of a BERT tokenizer; by default the
        checkpoint's folder when it holds one, else bert-base-uncased's vocabulary from an installed
        package. `spec.dtype` is the weights' dtype; the head always runs in float32, as officially."""
        import torch

        from blindspot.metrics.hpsv2 import read_state_dict

        self.name, self.model_id, self.revision = spec.name, spec.model_id, spec.revision or ""
        self.batch_size, self.bounds = batch_size, BOUNDS
        self.device, self.dtype = torch.device(spec.device), getattr(torch, spec.dtype)
        path = find_checkpoint("ImageReward", spec.path, spec.revision, checkpoint)
        sizes = read_sizes(path.parent)
        with self.device:  # built where it runs and in its dtype, then the weights are copied in
            model = build_model(sizes)
        model.vision.to(self.dtype)
        model.text.to(self.dtype)
        load_official_state_dict(model, read_state_dict(path), path)
        self.model = model.eval()
        if tokenizer is None and (path.parent / "tokenizer_config.json").is_file():
            tokenizer = str(path.parent)
        self.tokenizer = load_tokenizer(tokenizer)
        if len(self.tokenizer) > sizes["vocab_size"]:
            raise ValueError(
                f"{spec.name}: the tokenizer has {len(self.tokenizer)} tokens, the model {sizes['vocab_size']}"
            )
        self.preprocess = official_transform(sizes["image_size"])

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        import torch

        rewards: list[float] = []
        for batch_prompts, batch_images in batches(self.name, prompts, images, self.batch_size):
            pixels = torch.stack([self.preprocess(image) for image in batch_images])
            tokens = self.tokenizer(
                batch_prompts, padding="max_length", truncation=True, max_length=MAX_LENGTH, return_tensors="pt"
            )
            with torch.inference_mode():
                patches = self.model.vision(pixel_values=pixels.to(self.device, self.dtype)).last_hidden_state
                text = self.model.text(
                    input_ids=tokens["input_ids"].to(self.device),
                    attention_mask=tokens["attention_mask"].to(self.device),
                    encoder_hidden_states=patches,
                    encoder_attention_mask=torch.ones(patches.shape[:-1], dtype=torch.long, device=self.device),
                ).last_hidden_state
                reward = self.model.head(text[:, 0].float())[:, 0]
            rewards.extend(((reward - MEAN) / STD).tolist())
        return [Score(r) for r in rewards]
