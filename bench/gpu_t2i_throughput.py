"""Images per second of each paper text-to-image architecture at its real size, random weights.

For a GPU session: `python bench/gpu_t2i_throughput.py --out bench/out/t2i_gpu.json`. The
architectures come from bench/configs/t2i_real_size.yaml (their public configs); weights are
random, so the images are noise but the compute per image is the real one. On a CPU the script
only builds each transformer on the meta device and prints its parameter count.

Each batch size is timed twice: the pipeline alone, and with every image written as the render
stage writes it (a PNG and its sha256, in `BackgroundWrites` while the next batch renders). A
1024-px PNG takes 0.2 s (photo-like) or 0.14 s (noise) of a 2.6 GHz EPYC core to encode, outside the
GIL, but the writer takes the GIL back 40 to 60 times per image (Pillow compresses 64 KB at a time),
each time from the Python thread that launches the GPU's work: the second shows what that costs a
4-step model. The random weights make noise, which encodes faster than real images: real writes cost
somewhat more.
"""

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

CONFIGS = Path(__file__).resolve().parent / "configs" / "t2i_real_size.yaml"
TRANSFORMERS_CONFIGS = {
    "CLIPTextModel": "CLIPTextConfig",
    "CLIPTextModelWithProjection": "CLIPTextConfig",
    "T5EncoderModel": "T5Config",
    "Gemma2Model": "Gemma2Config",
}


def architectures() -> dict[str, Any]:
    return yaml.safe_load(CONFIGS.read_text())["architectures"]


def build_component(spec: dict[str, Any]) -> Any:
    import diffusers
    import transformers

    if spec["class"] in TRANSFORMERS_CONFIGS:
        config = getattr(transformers, TRANSFORMERS_CONFIGS[spec["class"]])(**spec["config"])
        return getattr(transformers, spec["class"])(config).eval()
    return getattr(diffusers, spec["class"])(**spec["config"]).eval()


def build_pipeline(architecture: dict[str, Any]) -> Any:
    import diffusers

    from blindspot.tiny.diffusion import _clip_tokenizer, _gemma_tokenizer, _t5_tokenizer

    tokenizers = {"clip": _clip_tokenizer, "t5": _t5_tokenizer, "gemma": _gemma_tokenizer}
    parts = {
        name: tokenizers[spec]() if isinstance(spec, str) else build_component(spec)
        for name, spec in architecture["components"].items()
    }
    shift = 1.0 if architecture["pipeline"] == "FluxPipeline" else 3.0
    return getattr(diffusers, architecture["pipeline"])(
        scheduler=diffusers.FlowMatchEulerDiscreteScheduler(shift=shift), **parts
    )


def transformer_parameters(architecture: dict[str, Any]) -> int:
    import torch

    with torch.device("meta"):
        model = build_component(architecture["components"]["transformer"])
    return sum(p.numel() for p in model.parameters())


def timed_calls(run: Callable[[], list], calls: int, batch: int, folder: Path | None = None) -> float:
    """Seconds for `calls` calls of `run`, each returning a batch of PIL images (so the device's work is
    done when it returns). With `folder`, each batch's images are written there as the render stage
    writes them, while the next batch renders (at most a batch waiting), and the time includes the
    last write."""
    from blindspot.images import BackgroundWrites
    from blindspot.protobias.render import save_image

    started = time.perf_counter()
    with BackgroundWrites(limit=batch) as writes:
        for call in range(calls):
            images = run()
            if folder is not None:
                for index, image in enumerate(images):
                    writes.submit(save_image, image, folder / f"{call}-{index}.png")
    return time.perf_counter() - started


def measure(name: str, architecture: dict[str, Any], batch_sizes: list[int], images: int) -> list[dict[str, Any]]:
    import torch

    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        pipeline = build_pipeline(architecture)
    torch.set_default_dtype(torch.float32)
    pipeline.set_progress_bar_config(disable=True)
    render = architecture["render"]
    extra = {"max_sequence_length": render["max_sequence_length"]}
    rows = []
    for batch in batch_sizes:
        prompts = ["a penguin on a rock with exactly three stones behind it"] * batch

        def run(prompts=prompts) -> list:
            generators = [torch.Generator("cuda").manual_seed(i) for i in range(len(prompts))]
            made = pipeline(
                prompt=prompts,
                num_inference_steps=render["steps"],
                guidance_scale=render["guidance"],
                height=render["height"],
                width=render["width"],
                generator=generators,
                **extra,
            )
            return made.images

        run()  # warm-up
        calls = max(1, images // batch)
        seconds = timed_calls(run, calls, batch)
        with tempfile.TemporaryDirectory() as folder:
            written_seconds = timed_calls(run, calls, batch, Path(folder))
        rows.append(
            {
                "model": name,
                "batch": batch,
                "images": calls * batch,
                "seconds": round(seconds, 3),
                "images_per_second": round(calls * batch / seconds, 4),
                "seconds_writing": round(written_seconds, 3),
                "write_overhead": round(written_seconds / seconds - 1, 4),
                "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=list(architectures()))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        for name in args.models:
            print(f"{name}: transformer with {transformer_parameters(architectures()[name]) / 1e9:.2f}B parameters")
        print("no GPU: parameter counts only")
        return
    rows = []
    for name in args.models:
        rows += measure(name, architectures()[name], args.batch_sizes, args.images)
        torch.cuda.empty_cache()  # the pipeline is gone with measure's frame
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
