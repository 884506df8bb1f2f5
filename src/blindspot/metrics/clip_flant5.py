"""VQAScore with CLIP-FlanT5 (Lin et al., "Evaluating Text-to-Visual Generation with Image-to-Text
Generation", ECCV 2024), the reference model of VQAScore, ported from the official `t2v_metrics` package
(3.0, `CLIPT5Model`) onto transformers' T5 and CLIP.

The official model (`CLIPT5ForConditionalGeneration`, LLaVA-1.5's recipe on FlanT5) is a CLIP vision
tower (ViT-L/14 at 336 px in the release), whose second-to-last layer's patch features (no [CLS]) go
through a 2-layer MLP projector (`mlp2x_gelu`) into the input embeddings of a FlanT5 encoder-decoder
(FlanT5-XXL in `zhiqiulin/clip-flant5-xxl`). The text around the image is LLaVA's chat format
(`t5_chat`): the system message, " USER: ", the image, then "\\n" + the question + " ASSISTANT: ".
Each chunk around the image is tokenised on its own, and T5's tokenizer ends each with </s>. The
score is the likelihood of the answer "Yes" (tokenised the same way, so "Yes" then </s>) given the
image and the question: exp of minus the mean cross-entropy over the answer's tokens, i.e. the
geometric mean of P(Yes | image, question) and P(</s> | ..., Yes).

The port runs the same computation on the maintained library: transformers' `CLIPVisionModel`,
`T5ForConditionalGeneration` and the same projector. The official loader also shrinks the embeddings
and LM head to the tokenizer's length (32,100 of FlanT5's 32,128 rows: `resize_token_embeddings`),
so the softmax runs over the tokenizer's tokens only; the port keeps those logits. The release's
weights are read under their own names (`official_key`), strictly: a key missing or left over is an
error, except the aliases of the shared embedding. Preprocessing is the official one: RGB, padded
to a square with the CLIP mean colour (`expand2square`), then CLIP's image processor (PIL backend).
The official scorer runs in bfloat16 on CUDA (weights cast to bf16, autocast); the registry's `dtype`
sets the port's.

`tests/metrics/test_clip_flant5.py` proves the port equal to the official package on a tiny model of the
release architecture (in .venv-ports: `requirements/ports.txt`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blindspot.models.checkpoints import default_dtype, load_mapped_state_dict, read_state_dict
from blindspot.models.spec import ModelSpec
from blindspot.plugins import HubFiles, Score, batches

SCORE_VERSION = 1  # bumped when a change alters its scores (`plugin_code`)
# Its tokenizer's and vision tower's repositories (`hub.repos`). The official CLIP-FlanT5 builds its
# tower from the tower's own weights before loading the release over them, so those are fetched too.
HUB_FILES = HubFiles(repo_args={"tokenizer": False, "vision_tower": True})

# t2v_metrics' `default_question_template` and `default_answer_template`.
QUESTION = 'Does this figure show "{prompt}"? Please answer yes or no.'
ANSWER = "Yes"
# LLaVA's system message (t2v_metrics.constants.SYSTEM_MSG) and the `t5_chat` conversation around the image.
SYSTEM_MESSAGE = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
BEFORE_IMAGE = SYSTEM_MESSAGE + " USER: "
AFTER_IMAGE = "\n{question} ASSISTANT: "
CONTEXT_LEN = 2048  # the tokenizer's model_max_length in the official loader: input ids are cut there
# Where the official loader reads the tokenizer: the base LLM's repository, not the model's.
HUB_TOKENIZER = "google/flan-t5-xxl"
# The official model's submodules: `vision_tower` (CLIPVisionTower, which holds the CLIPVisionModel as
# `vision_tower`; transformers 4 nests its layers in `vision_model`, transformers 5 does not) and
# `mm_projector`; the rest is T5ForConditionalGeneration's own names.
TOWER_PREFIX = "vision_tower.vision_tower."
VISION_PREFIX, PROJECTOR_PREFIX = TOWER_PREFIX + "vision_model.", "mm_projector."
# Keys a release may hold that the port does not read: CLIPT5's own alias of the shared embedding,
# T5's tied copies of it, and CLIP's position-id buffer (persistent before transformers 4.31).
ALIAS_KEYS = (
    "embed_tokens.weight",
    "encoder.embed_tokens.weight",
    "decoder.embed_tokens.weight",
    VISION_PREFIX + "embeddings.position_ids",
)
# The config keys the official model reads to build its vision side (LLaVA's ModelArguments).
VISION_KEYS = ("mm_vision_tower", "mm_hidden_size", "mm_projector_type", "mm_vision_select_layer")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def official_key(port_key: str) -> str:
    """The release's key of a port weight (`language.`, `vision.` or `projector.` and the library's name)."""
    for prefix, official in (("language.", ""), ("vision.", VISION_PREFIX), ("projector.", PROJECTOR_PREFIX)):
        if port_key.startswith(prefix):
            return official + port_key.removeprefix(prefix)
    raise KeyError(f"no CLIP-FlanT5 key is mapped to the port's weight '{port_key}'")


def read_config(folder: Path) -> dict[str, Any]:
    """The release's config.json: a T5 config plus the vision keys of LLaVA's ModelArguments."""
    file = folder / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"CLIP-FlanT5 model folder {folder} holds no config.json")
    config = json.loads(file.read_text())
    missing = [key for key in VISION_KEYS if key not in config]
    if missing:
        raise ValueError(f"{file} is not a CLIP-FlanT5 config: no {', '.join(missing)}")
    if config.get("mm_vision_select_feature", "patch") != "patch":
        raise ValueError(f"{file}: select feature {config['mm_vision_select_feature']!r} (the port reads 'patch')")
    return config


def read_weights(folder: Path) -> dict[str, Any]:
    """The release's state dict: one weight file, or the shards its index names (safetensors first)."""
    for name in WEIGHT_FILES:
        index = folder / f"{name}.index.json"
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            return {key: value for shard in shards for key, value in read_state_dict(folder / shard).items()}
        if (folder / name).is_file():
            return read_state_dict(folder / name)
    raise FileNotFoundError(f"CLIP-FlanT5 model folder {folder} holds none of {', '.join(WEIGHT_FILES)} (or an index)")


def model_folder(path: str | Path, revision: str | None) -> Path:
    """`path` when it is a folder, else the hub repository `path` (from the local hub cache when offline)."""
    if Path(path).is_dir():
        return Path(path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(path), revision=revision))


def tower_source(name: str, folder: Path) -> str:
    """The vision tower's folder or hub id as the config names it: a folder relative to the model's
    folder (a tiny model's), a folder, or a hub id (`openai/clip-vit-large-patch14-336` in the release)."""
    return str(folder / name) if (folder / name).is_dir() else name


def build_projector(kind: str, width_in: int, width_out: int) -> Any:
    """LLaVA's `build_vision_projector`: `linear`, or `mlp{N}x_gelu` (N linear layers with exact GELUs between)."""
    from torch import nn

    if kind == "linear":
        return nn.Linear(width_in, width_out)
    match = re.fullmatch(r"mlp(\d+)x_gelu", kind)
    if not match:
        raise ValueError(f"mm_projector_type {kind!r} is not supported (linear or mlp<N>x_gelu)")
    layers: list[nn.Module] = [nn.Linear(width_in, width_out)]
    for _ in range(1, int(match.group(1))):
        layers += [nn.GELU(), nn.Linear(width_out, width_out)]
    return nn.Sequential(*layers)


def build_model(config: Mapping[str, Any], vision_config: Any) -> Any:
    """The port with transformers' initial weights (loading replaces them): `language` (T5), `vision`
    (CLIP's vision model) and `projector`."""
    from torch import nn
    from transformers import CLIPVisionModel, T5Config, T5ForConditionalGeneration

    # the T5 part of the config (its model_type, `clip_t5`, is the official class's own)
    language = {key: value for key, value in config.items() if not key.startswith("mm_") and key != "model_type"}
    model = nn.Module()
    model.language = T5ForConditionalGeneration(T5Config.from_dict(language))
    if config.get("tie_word_embeddings", True) is False:
        # T5 v1.1 (FlanT5) has an LM head of its own. transformers 5 builds T5's head tied to the shared
        # embedding and unties it only in from_pretrained, when a checkpoint holds a different head.
        head = model.language.lm_head
        head.weight = nn.Parameter(head.weight.detach().clone())
        model.language.all_tied_weights_keys.pop("lm_head.weight", None)
    model.vision = CLIPVisionModel(vision_config)
    model.projector = build_projector(config["mm_projector_type"], config["mm_hidden_size"], config["d_model"])
    return model


def unique_keys(model: Any) -> list[str]:
    """The port's state-dict keys, each tied weight once (T5 ties its encoder's and decoder's embeddings
    to `shared`): what a release must hold."""
    first_names = dict(model.named_parameters())  # one name per parameter
    every_name = dict(model.named_parameters(remove_duplicate=False))
    return [key for key in model.state_dict() if key in first_names or key not in every_name]


def load_release(model: Any, state_dict: Mapping[str, Any], source: str | Path, with_vision: bool) -> None:
    """Load the release's weights: every port weight from its key (the vision tower's only when the
    release holds it), and no key left over but the `ALIAS_KEYS`; anything else names the keys."""
    wanted = {name: official_key(name) for name in unique_keys(model) if with_vision or not name.startswith("vision.")}
    # strict=False only for the tied copies (the same tensors as loaded ones); load_state_dict checks shapes
    load_mapped_state_dict(model, state_dict, wanted, ALIAS_KEYS, "CLIP-FlanT5", source, strict=False)


def expand_to_square(image: Any, background: tuple[int, ...]) -> Any:
    """LLaVA's `expand2square`: the image centred on a square of `background`, its longer side long."""
    from PIL import Image

    width, height = image.size
    if width == height:
        return image
    side = max(width, height)
    square = Image.new(image.mode, (side, side), background)
    square.paste(image, ((side - width) // 2, (side - height) // 2))
    return square


class CLIPFlanT5:
    bounds = (0.0, 1.0)

    def __init__(
        self,
        spec: ModelSpec,
        batch_size: int,
        question: str = QUESTION,
        answer: str = ANSWER,
        tokenizer: str | None = None,
        vision_tower: str | None = None,
    ):
        """`spec.path` is the model's folder or hub id (`zhiqiulin/clip-flant5-xxl`). `tokenizer` is a
        folder or hub id of FlanT5's tokenizer: by default the model's folder when it holds one, else
        `google/flan-t5-xxl`, as officially. `vision_tower` overrides the config's `mm_vision_tower` (a
        folder or hub id), whose config and image processor are read, and whose weights too when the
        release does not hold the tower's."""
        import torch
        from transformers import CLIPImageProcessorPil, CLIPVisionConfig, CLIPVisionModel, T5Tokenizer

        self.name, self.model_id, self.revision = spec.name, spec.model_id, spec.revision or ""
        self.batch_size, self.question = batch_size, question
        self.device, self.dtype = torch.device(spec.device), getattr(torch, spec.dtype)
        folder = model_folder(spec.path, spec.revision)
        config = read_config(folder)
        tower = vision_tower or tower_source(config["mm_vision_tower"], folder)
        self.select_layer = config["mm_vision_select_layer"]
        state_dict = read_weights(folder)
        with_vision = any(key.startswith(VISION_PREFIX) for key in state_dict)
        with self.device, default_dtype(self.dtype):  # built where it runs and in its dtype, then filled
            model = build_model(config, CLIPVisionConfig.from_pretrained(tower))
        load_release(model, state_dict, folder, with_vision)
        if not with_vision:
            model.vision = CLIPVisionModel.from_pretrained(tower, dtype=self.dtype).to(self.device)
        self.model = model.eval()
        if tokenizer is None:
            tokenizer = str(folder) if (folder / "spiece.model").is_file() else HUB_TOKENIZER
        self.tokenizer = T5Tokenizer.from_pretrained(tokenizer)
        # the official loader resizes the embeddings and LM head to the tokenizer (shrinking them)
        self.vocab = len(self.tokenizer)
        if self.vocab > config["vocab_size"]:
            raise ValueError(f"{spec.name}: the tokenizer has {self.vocab} tokens, the model {config['vocab_size']}")
        self.image_processor = CLIPImageProcessorPil.from_pretrained(tower)
        self.background = tuple(int(x * 255) for x in self.image_processor.image_mean)
        self.before = torch.tensor(self.tokenizer(BEFORE_IMAGE).input_ids, device=self.device)
        self.labels = torch.tensor(self.tokenizer(answer).input_ids, device=self.device)

    def encode_question(self, prompt: str) -> list[int]:
        """The token ids after the image: the question in the `t5_chat` format, ending with </s>."""
        ids = self.tokenizer(AFTER_IMAGE.format(question=self.question.format(prompt=prompt))).input_ids
        if len(self.before) + 1 + len(ids) > CONTEXT_LEN:
            raise ValueError(f"{self.name}: the prompt {prompt[:60]!r}... exceeds the model's {CONTEXT_LEN} tokens")
        return ids

    def score(self, prompts: list[str], images: list[Any]) -> list[Score]:
        import torch
        from torch.nn.utils.rnn import pad_sequence

        scores: list[Score] = []
        for batch_prompts, batch_images in batches(self.name, prompts, images, self.batch_size):
            squares = [expand_to_square(image.convert("RGB"), self.background) for image in batch_images]
            pixels = self.image_processor(squares, return_tensors="pt")["pixel_values"]
            after = [torch.tensor(self.encode_question(prompt)) for prompt in batch_prompts]
            ids = pad_sequence(after, batch_first=True, padding_value=self.tokenizer.pad_token_id).to(self.device)
            mask = pad_sequence([torch.ones_like(a) for a in after], batch_first=True).to(self.device)
            n = len(batch_prompts)
            with torch.inference_mode():
                hidden = self.model.vision(pixel_values=pixels.to(self.device, self.dtype), output_hidden_states=True)
                patches = self.model.projector(hidden.hidden_states[self.select_layer][:, 1:])
                embed = self.model.language.get_input_embeddings()
                inputs = torch.cat([embed(self.before).expand(n, -1, -1), patches, embed(ids)], dim=1)
                prefix = torch.ones(n, len(self.before) + patches.shape[1], dtype=mask.dtype, device=self.device)
                labels = self.labels.expand(n, -1).contiguous()  # T5's loss views them flat
                logits = self.model.language(
                    inputs_embeds=inputs, attention_mask=torch.cat([prefix, mask], dim=1), labels=labels
                ).logits[..., : self.vocab]
                log_p = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[..., None])[..., 0]
            scores.extend(Score(p) for p in log_p.mean(dim=-1).exp().tolist())
        return scores
