"""A tiny AlignScore: the release's architecture (BERTAlignModel: a RoBERTa encoder with its pooler,
masked-LM, binary, tri-label and regression heads) at small sizes with random weights, saved as the
release ships it, a Lightning checkpoint with the weights under `state_dict`, beside the RoBERTa
config and tokenizer that a release's `base` model would give.

The tokenizer is RoBERTa's (byte-level BPE with <s>, </s>, <pad>, <unk> and <mask>, sentence pairs as
`<s> A </s></s> B </s>`) over the vocabulary and merges of `tokenizer_from` (SmolLM2's byte-level BPE):
roberta-large's own vocabulary ships in no PyPI package.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CHECKPOINT_FILE = "AlignScore-tiny.ckpt"
# RoBERTa's layout: these four first (its position ids count from <pad>'s id), <mask> last.
LEADING_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")


def roberta_tokenizer(source: str | Path) -> Any:
    """RoBERTa's tokenizer over the byte-level BPE vocabulary and merges of the tokenizer at `source`."""
    from transformers import AutoTokenizer, RobertaTokenizer

    bpe = json.loads(AutoTokenizer.from_pretrained(source).backend_tokenizer.to_str())["model"]
    if bpe["type"] != "BPE":
        raise ValueError(f"{source}: a {bpe['type']} tokenizer; RoBERTa's needs a byte-level BPE")
    ordered = [*LEADING_TOKENS, *sorted(bpe["vocab"], key=bpe["vocab"].get), "<mask>"]
    vocab = {token: index for index, token in enumerate(dict.fromkeys(ordered))}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in bpe["merges"]]
    return RobertaTokenizer(vocab=vocab, merges=merges)


def build_random_align_score(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """Recipe `random_align_score`: `tokenizer_from` (a byte-level BPE tokenizer); `config` overrides
    the RoBERTa sizes."""
    import torch
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaModel

    out = Path(out)
    out.mkdir(parents=True)
    tokenizer = roberta_tokenizer(recipe["tokenizer_from"])
    sizes = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 514,
        "type_vocab_size": 1,
    } | dict(recipe.get("config", {}))
    config = RobertaConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        **sizes,
    )
    torch.manual_seed(seed)
    heads = {"bin_layer": 2, "tri_layer": 3, "reg_layer": 1}
    parts = {
        "base_model": RobertaModel(config, add_pooling_layer=True),
        "mlm_head": RobertaForMaskedLM(config).lm_head,
        **{name: torch.nn.Linear(config.hidden_size, n) for name, n in heads.items()},
    }
    state_dict = {
        f"{prefix}.{key}": value for prefix, part in parts.items() for key, value in part.state_dict().items()
    }
    torch.save({"state_dict": state_dict, "hyper_parameters": {"model": "roberta-large"}}, out / CHECKPOINT_FILE)
    config.save_pretrained(out)
    tokenizer.save_pretrained(out)
