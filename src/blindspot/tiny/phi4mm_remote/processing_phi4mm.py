"""The processor of the tiny Phi-4-multimodal, in the checkpoint's remote-code interface that vLLM's `phi4mm`
model calls: `Phi4MMProcessor(text, images)` returns `input_ids` with each `<|image_k|>` replaced by
`<|endoftext10|>` once per image token, `input_image_embeds` (a global 448-px view, then the 448-px crops of
the image resized into at most `dynamic_hd` crops and padded white), `image_attention_mask` (32 x 32 per crop,
0 over padding), `image_sizes` and `num_img_tokens`, as the checkpoint's processor computes them. Written here
because the hub's file cannot be fetched offline; numpy and PIL only (vLLM's CPU environment has no
torchvision). Audio is not processed: the tiny model is run on images only."""

import math
import re

import numpy as np
import torch
from PIL import Image
from transformers import AutoTokenizer, BatchFeature, ProcessorMixin

IMAGE_TOKEN = "<|endoftext10|>"
IMAGE_PATTERN = re.compile(r"<\|image_\d+\|>")
CROP, PATCH = 448, 14


class Phi4MMImageProcessor:
    def __init__(self, dynamic_hd=36):
        self.dynamic_hd = dynamic_hd

    def find_closest_aspect_ratio(self, aspect_ratio, target_ratios, width, height, image_size):
        best_ratio_diff, best_ratio, area = float("inf"), (1, 1), width * height
        for ratio in target_ratios:
            target_aspect_ratio = ratio[0] / ratio[1]
            ratio_diff = abs(aspect_ratio - target_aspect_ratio)
            if ratio_diff < best_ratio_diff:
                best_ratio_diff, best_ratio = ratio_diff, ratio
            elif ratio_diff == best_ratio_diff and area > 0.5 * image_size * image_size * ratio[0] * ratio[1]:
                best_ratio = ratio
        return best_ratio

    def dynamic_preprocess(self, image, max_num, min_num=1, image_size=CROP):
        width, height = image.size
        w_crops, h_crops = math.ceil(width / image_size), math.ceil(height / image_size)
        if w_crops * h_crops > max_num:
            ratios = sorted(
                {(i, j) for i in range(1, max_num + 1) for j in range(1, max_num + 1) if min_num <= i * j <= max_num},
                key=lambda r: r[0] * r[1],
            )
            w_crops, h_crops = self.find_closest_aspect_ratio(width / height, ratios, width, height, image_size)
        target_w, target_h = image_size * w_crops, image_size * h_crops
        if target_w / width < target_h / height:
            new_size, pad_w, pad_h = (
                (target_w, int(height * target_w / width)),
                0,
                target_h - int(height * target_w / width),
            )
        else:
            new_size, pad_w, pad_h = (
                (int(width * target_h / height), target_h),
                target_w - int(width * target_h / height),
                0,
            )
        mask = np.ones((h_crops * (image_size // PATCH), w_crops * (image_size // PATCH)), dtype=np.int64)
        if pad_w >= PATCH:
            mask[:, -math.floor(pad_w / PATCH) :] = 0
        if pad_h >= PATCH:
            mask[-math.floor(pad_h / PATCH) :, :] = 0
        canvas = Image.new("RGB", (target_w, target_h), (255, 255, 255))
        canvas.paste(image.resize(new_size, Image.BICUBIC), (0, 0))
        return canvas, mask

    def __call__(self, images, dynamic_hd=None):
        max_num = dynamic_hd or self.dynamic_hd
        pixels, masks, sizes, tokens = [], [], [], []
        for image in images:
            hd, mask = self.dynamic_preprocess(image.convert("RGB"), max_num)
            array = (np.asarray(hd, dtype=np.float32) / 255.0 - 0.5) / 0.5
            tensor = torch.from_numpy(array).permute(2, 0, 1)
            glb = torch.nn.functional.interpolate(tensor[None], size=(CROP, CROP), mode="bicubic")[0]
            h, w = tensor.shape[1] // CROP, tensor.shape[2] // CROP
            crops = tensor.reshape(3, h, CROP, w, CROP).permute(1, 3, 0, 2, 4).reshape(h * w, 3, CROP, CROP)
            side = CROP // PATCH
            crop_masks = torch.from_numpy(mask).reshape(h, side, w, side).permute(0, 2, 1, 3).reshape(h * w, side, side)
            pixels.append(torch.cat([glb[None], crops]))
            masks.append(torch.cat([torch.ones(1, side, side, dtype=torch.int64), crop_masks]))
            sizes.append([tensor.shape[1], tensor.shape[2]])
            useful = mask[0::2, 0::2]
            tokens.append(
                256 + 1 + int(useful.sum()) + int(useful[:, 0].sum()) + 16
            )  # global + separator + crops' tokens + their newlines + the global view's newlines
        most = max(p.shape[0] for p in pixels)
        padded = torch.zeros(len(pixels), most, 3, CROP, CROP)
        padded_masks = torch.zeros(len(pixels), most, CROP // PATCH, CROP // PATCH, dtype=torch.int64)
        for i, (p, m) in enumerate(zip(pixels, masks, strict=True)):
            padded[i, : p.shape[0]], padded_masks[i, : m.shape[0]] = p, m
        return {
            "input_image_embeds": padded,
            "image_sizes": torch.tensor(sizes),
            "image_attention_mask": padded_masks,
            "num_img_tokens": tokens,
        }


class Phi4MMAudioFeatureExtractor:
    sampling_rate = 16000

    def __call__(self, *args, **kwargs):
        raise NotImplementedError("the tiny Phi-4-multimodal takes no audio")


class Phi4MMProcessor(ProcessorMixin):
    attributes = ()

    def __init__(self, image_processor, audio_processor, tokenizer):
        self.image_processor, self.audio_processor, self.tokenizer = image_processor, audio_processor, tokenizer
        self.chat_template = getattr(tokenizer, "chat_template", None)

    @classmethod
    def from_pretrained(cls, path, tokenizer=None, dynamic_hd=None, **kwargs):
        import json
        from pathlib import Path

        settings = json.loads((Path(path) / "preprocessor_config.json").read_text())
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
        return cls(Phi4MMImageProcessor(dynamic_hd or settings["dynamic_hd"]), Phi4MMAudioFeatureExtractor(), tokenizer)

    def __call__(self, text=None, images=None, audios=None, return_tensors=None, **kwargs):
        if audios:
            self.audio_processor(audios)
        texts = [text] if isinstance(text, str) else list(text or [])
        image_inputs = self.image_processor(images) if images else {}
        counts = iter(image_inputs.get("num_img_tokens", []))
        texts = [IMAGE_PATTERN.sub(lambda _: IMAGE_TOKEN * next(counts), t) for t in texts]
        encoded = self.tokenizer(texts, padding=True, return_tensors="pt")
        return BatchFeature({**encoded, **image_inputs})

    def batch_decode(self, *args, **kwargs):
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args, **kwargs):
        return self.tokenizer.decode(*args, **kwargs)
