"""Score (prompt, image) pairs with the official ImageReward package (`image-reward` 1.5, its model
code unchanged) at a tiny model's sizes, from the tiny recipe's ImageReward.pt. Runs in .venv-ports
(requirements/ports.txt), never in the main environment:

    .venv-ports/bin/python tests/ports/image_reward_official.py score MODEL_DIR PAIRS_JSON OUT_JSON
    .venv-ports/bin/python tests/ports/image_reward_official.py release-keys MODEL_DIR OUT_JSON

`score` reads {"prompts": [...], "images": [png paths]} and writes {"scores": [...], "keys": [...],
"seconds": median or null}, one `ImageReward.score(prompt, image)` call per pair (the official entry
point); `--repeats N` times that loop as bench/timing.py's `timed` does (bench/peers/ports.py),
and the object is also printed as the last line of stdout. `release-keys`
writes the release-size model's state-dict keys and shapes ({key: shape}), random weights.

What is replaced, and only in the constructors, since the release hard-codes its sizes: the ViT
(`create_vit` builds the official `VisionTransformer` at the tiny sizes), the MLP's input width and
the image size; and `BertTokenizer.from_pretrained("bert-base-uncased")`, a hub download, reads the
same vocabulary from the model folder's vocab.txt (`init_tokenizer` then adds [DEC] and [ENC] itself).
The package's `__init__` is skipped: it imports the training code (diffusers, datasets, accelerate)
and OpenAI's `clip` for the CLIP and aesthetic baselines, none of which the reward model uses.
"""

import argparse
import importlib.util
import json
import sys
import tempfile
import types
from pathlib import Path

import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from timing import timed  # the benchmarks' one way to time an arm (stdlib only)

# BLIP's configs/med_config.json, which ImageReward's release uses (BERT-base with cross-attention).
MED_CONFIG = {
    "architectures": ["BertModel"],
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "model_type": "bert",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 0,
    "type_vocab_size": 2,
    "vocab_size": 30524,
    "encoder_width": 768,
    "add_cross_attention": True,
}


def import_official():
    root = Path(importlib.util.find_spec("ImageReward").submodule_search_locations[0])
    for name, folder in (("ImageReward", root), ("ImageReward.models", root / "models")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    import ImageReward.ImageReward as official
    from ImageReward.models.BLIP import blip, blip_pretrain, vit

    return official, blip, blip_pretrain, vit


def import_offline(model_dir: Path):
    """The official modules, with bert-base-uncased's tokenizer read from the model folder's vocab.txt."""
    from transformers import BertTokenizer

    official, blip, blip_pretrain, vit = import_official()

    def from_pretrained(name):
        assert name == "bert-base-uncased", name
        return BertTokenizer(str(model_dir / "vocab.txt"), do_lower_case=True)

    blip.BertTokenizer = types.SimpleNamespace(from_pretrained=from_pretrained)
    return official, blip_pretrain, vit


def tiny_official(model_dir: Path, med_config: Path):
    official, blip_pretrain, vit = import_offline(model_dir)
    sizes = json.loads((model_dir / "image_reward.json").read_text())
    width = sizes["vision_width"]

    def create_vit(name, image_size, use_grad_checkpointing=False, ckpt_layer=0, drop_path_rate=0):
        encoder = vit.VisionTransformer(
            img_size=sizes["image_size"],
            patch_size=sizes["patch_size"],
            embed_dim=width,
            depth=sizes["vision_layers"],
            num_heads=sizes["vision_heads"],
            mlp_ratio=sizes["vision_mlp"] / width,
            drop_path_rate=0.1,
        )
        return encoder, width

    blip_pretrain.create_vit = create_vit
    mlp, transform = official.MLP, official._transform
    official.MLP = lambda input_size: mlp(sizes["text_width"])
    official._transform = lambda n_px: transform(sizes["image_size"])
    config = MED_CONFIG | {
        "hidden_size": sizes["text_width"],
        "intermediate_size": sizes["text_mlp"],
        "num_hidden_layers": sizes["text_layers"],
        "num_attention_heads": sizes["text_heads"],
        "max_position_embeddings": sizes["max_positions"],
        "vocab_size": sizes["vocab_size"],
    }
    med_config.write_text(json.dumps(config))
    model = official.ImageReward(med_config=str(med_config), device="cpu")
    model.load_state_dict(torch.load(model_dir / "ImageReward.pt", map_location="cpu"), strict=True)
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    score = sub.add_parser("score")
    score.add_argument("model_dir", type=Path)
    score.add_argument("pairs", type=Path)
    score.add_argument("out", type=Path)
    score.add_argument("--repeats", type=int, default=0, help="time the scoring loop this many times after the first")
    keys = sub.add_parser("release-keys")
    keys.add_argument("model_dir", type=Path)
    keys.add_argument("out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        med_config = Path(tmp) / "med_config.json"
        if args.command == "score":
            model = tiny_official(args.model_dir, med_config)
            pairs = json.loads(args.pairs.read_text())

            def score_pairs():
                with torch.no_grad():
                    return [
                        model.score(p, Image.open(i)) for p, i in zip(pairs["prompts"], pairs["images"], strict=True)
                    ]

            seconds, scores = timed(score_pairs, args.repeats) if args.repeats else (None, score_pairs())
            result = {"scores": scores, "keys": sorted(model.state_dict()), "seconds": seconds}
            print(json.dumps(result))
        else:
            official, _, _ = import_offline(args.model_dir)
            med_config.write_text(json.dumps(MED_CONFIG))
            model = official.ImageReward(med_config=str(med_config), device="cpu")
            result = {key: list(tensor.shape) for key, tensor in model.state_dict().items()}
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
