"""Score (prompt, image) pairs with the official HPSv2 package (`hpsv2` 1.2.0, its code unchanged) on a
tiny model's checkpoint. Runs in .venv-ports (requirements/ports.txt), never in the main environment:

    .venv-ports/bin/python tests/ports/hpsv2_official.py MODEL_DIR ARCHITECTURE_JSON PAIRS_JSON OUT_JSON [--repeats N]

PAIRS_JSON holds {"prompts": [...], "images": [png paths]}; OUT_JSON gets {"scores": [...], "seconds":
median or null}, the cosines of `hpsv2.img_score.score` (one pair at a time, as it scores), and the
object is also printed as the last line of stdout. That function hard-codes ViT-H-14 and a hub download,
so its steps are run here as it runs them: the same `create_model_and_transforms` arguments with the
tiny architecture (registered with hpsv2's own open_clip fork) and no pretrained tag,
`load_state_dict(checkpoint["state_dict"])`, the same tokenizer lookup, preprocessing and feature
product (its `torch.cuda.amp.autocast()` does nothing on the CPU, so it is left out). `--repeats N`
times the scoring loop as bench/timing.py's `timed` does (a warm-up, then the median of N;
bench/peers/ports.py).
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from hpsv2.src.open_clip import create_model_and_transforms, get_tokenizer
from hpsv2.src.open_clip.factory import add_model_config
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from timing import timed  # the benchmarks' one way to time an arm (stdlib only)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("architecture", type=Path)
    parser.add_argument("pairs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeats", type=int, default=0, help="time the scoring loop this many times after the first")
    args = parser.parse_args()

    add_model_config(args.architecture)
    name = args.architecture.stem
    model, _, preprocess_val = create_model_and_transforms(
        name,
        None,
        precision="amp",
        device="cpu",
        jit=False,
        force_quick_gelu=False,
        force_custom_text=False,
        force_patch_dropout=False,
        force_image_size=None,
        pretrained_image=False,
        image_mean=None,
        image_std=None,
        light_augmentation=True,
        aug_cfg={},
        output_dict=True,
        with_score_predictor=False,
        with_region_predictor=False,
    )
    (checkpoint_file,) = args.model_dir.glob("*.pt")
    checkpoint = torch.load(checkpoint_file, map_location="cpu")
    model.load_state_dict(checkpoint["state_dict"])
    tokenizer = get_tokenizer(name)
    model.eval()

    pairs = json.loads(args.pairs.read_text())

    def score_pairs():
        scores = []
        for prompt, path in zip(pairs["prompts"], pairs["images"], strict=True):
            with torch.no_grad():
                image = preprocess_val(Image.open(path)).unsqueeze(0)
                text = tokenizer([prompt])
                outputs = model(image, text)
                logits_per_image = outputs["image_features"] @ outputs["text_features"].T
                scores.append(torch.diagonal(logits_per_image).item())
        return scores

    seconds, scores = timed(score_pairs, args.repeats) if args.repeats else (None, score_pairs())
    result = {"scores": scores, "seconds": seconds}
    args.out.write_text(json.dumps(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
