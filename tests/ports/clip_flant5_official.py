"""Score (prompt, image) pairs with the official CLIP-FlanT5 VQAScore (`t2v_metrics` 3.0, its model code
unchanged) on a tiny model's folder. Runs in .venv-ports (requirements/ports.txt), never in the main
environment:

    .venv-ports/bin/python tests/ports/clip_flant5_official.py MODEL_DIR PAIRS_JSON OUT_JSON

PAIRS_JSON holds {"prompts": [...], "images": [png paths]}; OUT_JSON gets {"scores": [...], "keys":
[...]}: `CLIPT5Model.forward(images, texts)` on all pairs in one batch (its defaults: the question and
answer templates), and the official model's state-dict keys.

What is replaced: `CLIPT5Model.load_model` names hub repositories (zhiqiulin/clip-flant5-xxl and
google/flan-t5-xxl), so its one call, `load_pretrained_model`, is made here with the same arguments and
the tiny folder for both, and the attributes it sets are set the same way. That loader casts the
model to bfloat16 for CUDA's autocast; on the CPU it is cast back to float32 (the tiny weights lie on
bfloat16's grid, so nothing is lost) to compare with the port in float32. The package's `__init__`s
are skipped (they import every other metric's dependencies and check for ffmpeg), and `cv2`, which
mm_utils imports for its video helpers only, is an empty module. The working directory is the model
folder, where the config's relative `mm_vision_tower` lies.
"""

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import types
from pathlib import Path


def import_official():
    root = Path(importlib.util.find_spec("t2v_metrics").submodule_search_locations[0])
    for name, folder in (
        ("t2v_metrics", root),
        ("t2v_metrics.models", root / "models"),
        ("t2v_metrics.models.vqascore_models", root / "models" / "vqascore_models"),
    ):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    sys.modules["cv2"] = types.ModuleType("cv2")
    import t2v_metrics.models.vqascore_models.clip_t5_model as clip_t5_model
    from t2v_metrics.models.model import image_loader

    return clip_t5_model, image_loader


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("pairs", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    pairs = json.loads(args.pairs.read_text())
    images = [str(Path(path).resolve()) for path in pairs["images"]]
    official, image_loader = import_official()
    settings = official.CLIP_T5_MODELS["clip-flant5-xxl"]
    os.chdir(args.model_dir)
    with tempfile.TemporaryDirectory() as cache_dir:
        tokenizer, model, image_processor = official.load_pretrained_model(
            official.CLIPT5ForConditionalGeneration,
            official.ModelArguments(),
            model_path=".",
            tokenizer_path=".",
            model_max_length=settings["tokenizer"]["model_max_length"],
            padding_side=None,
            image_aspect_ratio=settings["model"]["image_aspect_ratio"],
            mmprojector_repo=None,
            mmprojector_name=None,
            device="cpu",
            cache_dir=cache_dir,
        )
    scorer = object.__new__(official.CLIPT5Model)
    scorer.model_name, scorer.device, scorer.image_loader = "clip-flant5-xxl", "cpu", image_loader
    scorer.tokenizer, scorer.model, scorer.image_processor = tokenizer, model.float(), image_processor
    scorer.image_aspect_ratio = settings["model"]["image_aspect_ratio"]
    scorer.conversational_style = settings["model"]["conversation"]
    scorer.context_len = official.CONTEXT_LEN
    scores = scorer.forward(images, pairs["prompts"]).tolist()
    args.out.write_text(json.dumps({"scores": scores, "keys": sorted(model.state_dict())}))


if __name__ == "__main__":
    main()
