"""HPSv2 (Wu et al., Human Preference Score v2; v2.1 by default): an OpenCLIP ViT-H/14 fine-tuned on
human preferences, run through open_clip the way the official `hpsv2` package (1.2.0) runs it.

The official scorer builds `ViT-H-14` with `light_augmentation=True`, loads `checkpoint["state_dict"]`
strictly, and scores `image_features @ text_features.T` with both features L2-normalised: a cosine,
per (prompt, image) pair. `hpsv2.score()` returns that cosine; the HPSv2 benchmark
(`hpsv2.evaluation`) reports it x 100, the convention of its leaderboard (v2.1 scores around 25-35).
`scale` picks the convention (100 by default); a cosine keeps the raw score in [-scale, scale], which
are the bounds.

Preprocessing is the official one, step for step (`letterbox`): `light_augmentation=True` makes
hpsv2's val transform turn the image into a float tensor, resize its longest side to the model's size
(bicubic, on the tensor) and pad the rest with black, centred: a letterbox, not a centre crop.
open_clip's own `image_resize_mode="longest"` resizes the PIL image instead, which moves scores by up
to 0.04 on the 0-100 scale, so it is not used. A ports test proves the scores equal to hpsv2 1.2.0's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blindspot.models.checkpoints import find_checkpoint, load_strictly, read_state_dict
from blindspot.models.spec import ModelSpec
from blindspot.plugins import HubFiles, Score, batches

SCORE_VERSION = 1  # bumped when a change alters its scores (`plugin_code`)

# The checkpoint file in the `xswu/HPSv2` hub repository, when the registry entry gives the hub id.
HUB_CHECKPOINT = "HPS_v2.1_compressed.pt"
# The release's checkpoint, and its architecture beside it when that is a .json config (`hub.repos`).
HUB_FILES = HubFiles(checkpoint=HUB_CHECKPOINT, file_args=("architecture",))
# What open_clip needs in a model config file for it to count as one.
_CONFIG_KEYS = ("embed_dim", "vision_cfg", "text_cfg")


def register_architecture(config_file: str | Path) -> str:
    """Register an open_clip model config file with open_clip under its file stem; return that name.
    A name that open_clip already knows with another config is refused rather than overwritten."""
    import open_clip

    config_file = Path(config_file)
    config = json.loads(config_file.read_text())
    if not all(key in config for key in _CONFIG_KEYS):
        raise ValueError(f"{config_file} is not an open_clip model config (needs keys {', '.join(_CONFIG_KEYS)})")
    name = config_file.stem
    known = open_clip.get_model_config(name)
    if known is not None and known != config:
        raise ValueError(f"open_clip already has a model '{name}' with another config; rename {config_file}")
    if known is None:
        open_clip.add_model_config(config_file)
    return name


def resolve_architecture(architecture: str, folder: Path) -> str:
    """An open_clip model name as given (e.g. `ViT-H-14`), or a `.json` config file in the model's
    folder (a tiny model's architecture), registered with open_clip first."""
    if architecture.endswith(".json"):
        return register_architecture(folder / architecture)
    return architecture


def letterbox(pixels: Any, size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> Any:
    """hpsv2 1.2.0's val transform (`image_transform(light_augmentation=True)`: ToTensor, then
    `ResizeMaxSize` on the tensor, then Normalize) of images of one size, as a stack of `to_tensor`
    images (N, 3, H, W): one resize for all of them. Where the longest side already has the model's
    size, hpsv2 skips the padding too, and a non-square image then fails in its ViT; it is padded here."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as F

    height, width = pixels.shape[-2:]
    scale = size / max(height, width)
    if scale != 1.0:
        pixels = F.resize(pixels, [round(height * scale), round(width * scale)], InterpolationMode.BICUBIC)
    pad_h, pad_w = size - pixels.shape[-2], size - pixels.shape[-1]
    pixels = F.pad(pixels, [pad_w // 2, pad_h // 2, pad_w - pad_w // 2, pad_h - pad_h // 2], fill=0)
    return F.normalize(pixels, mean, std)


class HPSv2:
    def __init__(
        self,
        spec: ModelSpec,
        batch_size: int,
        architecture: str = "ViT-H-14",
        scale: float = 100.0,
        checkpoint: str = HUB_CHECKPOINT,
    ):
        """`spec.path` is a checkpoint file, a folder holding exactly one (with a tiny model's config
        file), or the hub id `xswu/HPSv2`, whose `checkpoint` file must be in the local hub cache.
        `architecture` is an open_clip model name, or a `.json` config file in the model's folder.
        `spec.dtype` float16 or bfloat16 runs under autocast with float32 weights, like the official
        `precision='amp'`; anything else runs in float32."""
        import open_clip
        import torch

        self.name, self.model_id, self.revision = spec.name, spec.model_id, spec.revision or ""
        self.batch_size = batch_size
        self.scale = float(scale)
        self.bounds = (-self.scale, self.scale)
        self.device = torch.device(spec.device)
        path = find_checkpoint("HPSv2", spec.path, spec.revision, checkpoint)
        self.architecture = resolve_architecture(architecture, path.parent)
        with self.device:  # built where it runs, then the weights are copied in
            model = open_clip.create_model(self.architecture, pretrained=None, device=self.device)
        size = model.visual.preprocess_cfg["size"]
        if size[0] != size[1]:
            raise ValueError(f"HPSv2 letterboxes to a square; '{self.architecture}' takes {size[0]}x{size[1]} images")
        self.image_size, self.image_mean, self.image_std = size[0], model.visual.image_mean, model.visual.image_std
        load_strictly(
            model, read_state_dict(path), f"checkpoint {path} does not fit open_clip architecture '{self.architecture}'"
        )
        self.tokenizer = open_clip.get_tokenizer(self.architecture)
        self.model = model.eval()
        half = getattr(torch, spec.dtype, None)
        self.autocast_dtype = half if half in (torch.float16, torch.bfloat16) else None

    def preprocess(self, images: list[Any]) -> Any:
        """The images as the model takes them (N, 3, size, size): those of one size letterboxed together."""
        import torch
        from torchvision.transforms import functional as F

        tensors = [F.to_tensor(image.convert("RGB")) for image in images]
        pixels = torch.empty(len(tensors), 3, self.image_size, self.image_size)
        by_size: dict[tuple[int, ...], list[int]] = {}
        for index, tensor in enumerate(tensors):
            by_size.setdefault(tuple(tensor.shape), []).append(index)
        for indices in by_size.values():
            stack = torch.stack([tensors[index] for index in indices])
            pixels[indices] = letterbox(stack, self.image_size, self.image_mean, self.image_std)
        return pixels

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        import torch

        cosines: list[float] = []
        for batch_prompts, batch_images in batches(self.name, prompts, images, self.batch_size):
            pixels = self.preprocess(batch_images).to(self.device)
            tokens = self.tokenizer(batch_prompts).to(self.device)
            autocast = torch.autocast(
                self.device.type, dtype=self.autocast_dtype or torch.float32, enabled=self.autocast_dtype is not None
            )
            with torch.inference_mode(), autocast:
                image = self.model.encode_image(pixels, normalize=True).float()
                text = self.model.encode_text(tokens, normalize=True).float()
            cosines.extend((image * text).sum(dim=-1).tolist())
        return [Score(self.scale * c) for c in cosines]
