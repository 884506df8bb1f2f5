"""The GPU check: what to run first whenever a GPU is lent (`bench/gpu_check.sh` runs it, in at most
8 minutes). On random-weight models of the paper's real sizes, through the project's own code:

- t2i: images per second of each text-to-image architecture (bench/configs/t2i_real_size.yaml)
  through the render path (`render_triplets`: planning, resume checks, each PNG and its sha256
  sidecar written in the background) and through a plain diffusers loop (the pipeline called per
  batch, the images kept in memory); their ratio is the render overhead (issue 19's goal: 5 %).
- vlm: the VLM filter's images per second (`judge_images`' scoring, at the render size) and
  HumbleBench's questions per second (`answer_questions`, at the release's 640x480), through
  transformers, the model loaded by the job's own loader from a folder the check writes.
- protoscore: seconds per optimizer step of ProtoScore's LoRA training (`protoscore.train`, the
  paper config's settings: 16 pairs a step, both images forward and backward).
- decode: answers per second of a 7B language model decoding long forced answers (every answer
  `--answer-tokens` long, greedy), 16 a call (`humblebench.batch_size`, what a job did before issue
  45) against the whole set in one call, the gain of a full batch (vLLM's engine gets one, and keeps
  it full as answers end); through transformers' `generate`, the GPU machine having no vLLM.

Each row has the peak GPU memory beside the registry's `weights_gb`. The JSON (`--out`) is written
again after every model, so a run cut off keeps what it measured, and every model is freed before the
next is built; the table is printed at the end. With `--dry` (the test suite runs it on a CPU) every
model is built on the meta device, its parameters counted, and what would be measured printed. It does
not measure vLLM (not on the GPU machine), `torch.compile`, model loading from a file system, or any
real model's outputs (the weights are random).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from gpu_t2i_throughput import architectures as t2i_architectures
from gpu_t2i_throughput import build_pipeline, transformer_parameters
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
PAPER = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
VLMS = yaml.safe_load((REPO / "bench" / "configs" / "vlm_real_size.yaml").read_text())["architectures"]
DECODER = yaml.safe_load((REPO / "bench" / "configs" / "lm_real_size.yaml").read_text())["decoder"]
# The tiny preset's VLMs, whose processors the check uses (`gpu_check.sh --prepare` builds them).
ASSETS = REPO / "bench" / ".gpu_assets" / "models"
SECTIONS = ("t2i", "vlm", "protoscore", "decode")
SEED = 0
HUMBLE_IMAGE = (640, 480)  # COCO's size, as the release's images are (also `blindspot doctor`'s estimate)
FILTER_VLM, PROTOSCORE_VLM = "qwen2.5-vl-7b-instruct", "qwen3-vl-4b-instruct-hf"


def weights_gb(name: str) -> float | None:
    return PAPER["models"].get(name, {}).get("weights_gb")


def noise(size: tuple[int, int], seed: int) -> Image.Image:
    width, height = size
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


class Peak:
    """Peak GPU memory over a block, in GiB (None on a CPU)."""

    def __init__(self, device: str):
        self.device, self.gib = device, None

    def __enter__(self) -> Peak:
        import torch

        if self.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc: object) -> None:
        import torch

        if self.device == "cuda":
            self.gib = round(torch.cuda.max_memory_allocated() / 2**30, 1)


def fastest(run: Callable[[], Any], rounds: int) -> float:
    """The fastest of `rounds` timed calls (noise only ever adds time)."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def row(section: str, model: str, arm: str, items: int, seconds: float, peak: Peak, **extra: Any) -> dict[str, Any]:
    return {
        "section": section,
        "model": model,
        "arm": arm,
        "items": items,
        "seconds": round(seconds, 3),
        "items_per_second": round(items / seconds, 4),
        "peak_gib": peak.gib,
        "weights_gb": weights_gb(model),
        **extra,
    }


def free(device: str) -> None:
    """Whatever the last model left: collected, and the GPU's cache emptied, before the next is built."""
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def t2i(device: str, images: int, rounds: int) -> Iterator[list[dict[str, Any]]]:
    """Each T2I model's two rows as it finishes."""
    import torch

    from blindspot.models.spec import ModelSpec
    from blindspot.protobias.render import DiffusersRenderer, plan_renders, render_triplets

    for name, architecture in t2i_architectures().items():
        with Peak(device) as peak:
            torch.set_default_dtype(torch.bfloat16)
            with torch.device(device):
                pipeline = build_pipeline(architecture)
            torch.set_default_dtype(torch.float32)
            spec = ModelSpec(
                name=name,
                backend="diffusers",
                gpus=1,
                dtype="bfloat16",
                path="(random weights)",
                pipeline=architecture["pipeline"],
                render=architecture["render"],
                allow_cpu=True,
            )
            renderer = DiffusersRenderer(spec, pipeline=pipeline)
            numbers = range(images // 2)
            triplets = pd.DataFrame(
                {
                    "triplet_id": [f"t{i}" for i in numbers],
                    "correct_description": [f"a penguin on a rock with exactly {i % 4 + 1} stones" for i in numbers],
                    "adversarial_description": [f"a penguin on an ice floe beside {i % 3 + 2} fish" for i in numbers],
                }
            )
            batch = PAPER["image_stage"]["render_batch_size"]
            with tempfile.TemporaryDirectory() as scratch:
                jobs = plan_renders(triplets, spec, Path(scratch), 1, SEED)

                def plain(jobs=jobs, renderer=renderer, batch=batch) -> None:
                    for start in range(0, len(jobs), batch):
                        part = jobs[start : start + batch]
                        renderer.render([job.description for job in part], [job.seed for job in part])

                def ours(triplets=triplets, spec=spec, renderer=renderer, scratch=scratch, batch=batch) -> None:
                    render_triplets(triplets, spec, tempfile.mkdtemp(dir=scratch), 1, SEED, batch, renderer=renderer)

                renderer.render([jobs[0].description], [jobs[0].seed])  # warm-up: kernels, allocator
                plain_s, ours_s = fastest(plain, rounds), fastest(ours, rounds)
        overhead = round(ours_s / plain_s - 1, 4)
        # the pipeline is held by the arms' defaults too: all of them go before the next model is built
        del pipeline, renderer, plain, ours
        free(device)
        yield [
            row("t2i", name, "plain diffusers loop", len(jobs), plain_s, peak),
            row("t2i", name, "render path", len(jobs), ours_s, peak, overhead=overhead),
        ]


def render_size() -> dict[str, int]:
    """The size the paper config's first T2I model renders at: what the VLM filter and ProtoScore read."""
    render = PAPER["models"][PAPER["image_stage"]["t2i_models"][0]]["render"]
    return {"width": render["width"], "height": render["height"]}


def vlm_config(name: str, tokens: dict[str, int] | None = None) -> Any:
    import transformers

    architecture = VLMS[name]
    return getattr(transformers, architecture["config_class"])(**architecture["config"], **(tokens or {}))


def vlm_parameters(name: str) -> int:
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(vlm_config(name))
    return sum(p.numel() for p in model.parameters())


def build_vlm(name: str, folder: Path, device: str) -> Path:
    """A random-weight VLM of the real size, saved with the tiny preset's processor of its architecture
    (given the real processor's pixel limits) where the job's loader reads it."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    architecture = VLMS[name]
    tiny = ASSETS / architecture["tiny"]
    processor = AutoProcessor.from_pretrained(tiny)
    for key, value in architecture["pixels"].items():
        setattr(processor.image_processor, key, value)
    processor.image_processor.size = {
        "shortest_edge": architecture["pixels"]["min_pixels"],
        "longest_edge": architecture["pixels"]["max_pixels"],
    }
    ids = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    tokens = {key: getattr(AutoConfig.from_pretrained(tiny), key) for key in ids}
    torch.manual_seed(SEED)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(vlm_config(name, tokens), dtype=torch.bfloat16)
    out = folder / name
    model.save_pretrained(out)
    processor.save_pretrained(out)
    del model
    gc.collect()
    return out


def vlm_spec(name: str, path: Path) -> Any:
    from blindspot.models.spec import ModelSpec

    return ModelSpec(name=name, backend="transformers", gpus=1, dtype="bfloat16", path=str(path), allow_cpu=True)


def vlm(device: str, items: int, rounds: int) -> Iterator[list[dict[str, Any]]]:
    from blindspot.humblebench.answers import Asked, answer_questions
    from blindspot.humblebench.settings import NOTA_TEXT, Question, present
    from blindspot.models.vlm_scoring import TransformersVLMScorer, image_conversation
    from blindspot.prompts import PromptTemplate
    from blindspot.registry import AnswerProtocol, Decoding

    humble, stage = PAPER["humblebench"], PAPER["image_stage"]
    render = render_size()
    with tempfile.TemporaryDirectory() as scratch, Peak(device) as peak:
        started = time.perf_counter()
        spec = vlm_spec(FILTER_VLM, build_vlm(FILTER_VLM, Path(scratch), device))
        built_s = time.perf_counter() - started
        started = time.perf_counter()
        scorer = TransformersVLMScorer(spec, batch_size=humble["batch_size"], max_new_tokens=8)
        load_s = time.perf_counter() - started
        setting = humble["tables"]["original"]
        template = PromptTemplate.load(REPO / humble["settings"][setting]["template"])
        options = ("red", "blue", "green", "white", NOTA_TEXT)
        questions = [
            (
                present(Question(f"q{i}", "What colour is the cup?", options, "A", "Attribute"), setting, {}, SEED),
                noise(HUMBLE_IMAGE, i),
            )
            for i in range(items)
        ]
        # the uniform protocol: the letter prompt, greedy, the config's budget (`registry.answer_protocol`)
        protocol = AnswerProtocol("uniform", str(REPO / humble["prompt"]), "", Decoding(), humble["max_new_tokens"])
        asked = Asked.load({setting: template}, protocol, SEED)
        answer_questions(questions[:1], scorer, asked)  # warm-up
        answer_s = fastest(lambda: answer_questions(questions, scorer, asked), rounds)
        judge = PromptTemplate.load(REPO / stage["judge_template"])
        conversations = [image_conversation(judge, description="a penguin on a rock with three stones")] * items
        renders = [noise((render["width"], render["height"]), i) for i in range(items)]
        judge_s = fastest(lambda: scorer.score(conversations, renders), rounds)
    scorer = None  # the arms' closures hold it: rebinding the name frees the model
    free(device)
    about = {"built_s": round(built_s, 1), "load_s": round(load_s, 1)}
    yield [
        row(
            "vlm",
            FILTER_VLM,
            f"HumbleBench answers at {HUMBLE_IMAGE[0]}x{HUMBLE_IMAGE[1]}",
            items,
            answer_s,
            peak,
            **about,
        ),
        row(
            "vlm",
            FILTER_VLM,
            f"VLM filter scores at {render['width']}x{render['height']}",
            items,
            judge_s,
            peak,
            **about,
        ),
    ]


def protoscore(device: str, steps: int) -> Iterator[list[dict[str, Any]]]:
    from blindspot.models.protoscore_model import TrainSettings, load_scorer
    from blindspot.protobias.protoscore import train

    settings = TrainSettings.from_config(PAPER["protoscore"] | {"checkpoint_every": 10**6}, SEED)
    pairs_per_step = settings.batch_size * settings.accumulation
    with tempfile.TemporaryDirectory() as scratch, Peak(device) as peak:
        folder = Path(scratch)
        spec = vlm_spec(PROTOSCORE_VLM, build_vlm(PROTOSCORE_VLM, folder, device))
        scorer = load_scorer(spec, settings)
        count = pairs_per_step * (steps + 1) + 2  # and a held-out pair or two
        render = render_size()
        paths = []
        for i in range(2 * count):
            paths.append(folder / f"{i}.png")
            noise((render["width"], render["height"]), i).save(paths[-1])
        pairs = pd.DataFrame(
            {
                "neutral_prompt": ["a penguin on a rock"] * count,
                "corr_path": paths[::2],
                "adv_path": paths[1::2],
                "pair_id": [f"p{i}" for i in range(count)],
                "seed_id": [f"s{i}" for i in range(count)],
            }
        )
        history = train(scorer, pairs, folder / "out", folder / "checkpoint", stop_after_steps=steps)
    del scorer
    free(device)
    # The first step holds the kernels' warm-up: the rate from the steps after it.
    seconds = pairs_per_step / float(history["pairs_per_second"].iloc[-1]) if len(history) else float("nan")
    yield [
        row(
            "protoscore",
            PROTOSCORE_VLM,
            f"LoRA training, {pairs_per_step} pairs a step",
            pairs_per_step,
            seconds,
            peak,
            steps=len(history),
        )
    ]


def decoder_config() -> Any:
    import transformers

    return getattr(transformers, DECODER["config_class"])(**DECODER["config"])


def decode(device: str, answers: int, answer_tokens: int, small_batch: int) -> Iterator[list[dict[str, Any]]]:
    """`answers` long answers (`answer_tokens` each, forced: no end before it) from a 7B decoder with random
    weights, `small_batch` a call against all in one call: answers per second of each."""
    import torch
    from transformers import AutoModelForCausalLM

    with Peak(device) as peak:
        torch.manual_seed(SEED)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(decoder_config(), dtype=torch.bfloat16)
        model.eval()
        # prompts of a question's length (a question, its options and the letter prompt: ~120 tokens)
        prompts = torch.randint(1000, 100000, (answers, 120), device=device)
        forced = {"max_new_tokens": answer_tokens, "min_new_tokens": answer_tokens, "do_sample": False}

        def calls(size: int) -> None:
            with torch.inference_mode():
                for start in range(0, answers, size):
                    part = prompts[start : start + size]
                    model.generate(input_ids=part, attention_mask=torch.ones_like(part), **forced)

        with torch.inference_mode():  # warm-up: kernels, allocator
            model.generate(input_ids=prompts[:2], attention_mask=torch.ones_like(prompts[:2]), max_new_tokens=4)
        small_s, full_s = fastest(lambda: calls(small_batch), 1), fastest(lambda: calls(answers), 1)
    model = None  # `calls` holds it: rebinding the name frees the model
    free(device)
    about = {"answer_tokens": answer_tokens}
    name = DECODER["name"]
    yield [
        row("decode", name, f"{small_batch} answers a call", answers, small_s, peak, **about),
        row(
            "decode",
            name,
            f"{answers} answers in one call",
            answers,
            full_s,
            peak,
            **about,
            gain=round(small_s / full_s, 2),
        ),
    ]


def dry(sections: list[str]) -> list[dict[str, Any]]:
    """What a GPU run would measure, each model built on the meta device and its parameters counted."""
    rows = []
    if "t2i" in sections:
        for name, architecture in t2i_architectures().items():
            billions = transformer_parameters(architecture) / 1e9
            measures = "images/s: render path and plain diffusers loop, their ratio; peak GPU memory"
            rows.append({"section": "t2i", "model": name, "parameters_b": round(billions, 2), "measures": measures})
    if "decode" in sections:
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(decoder_config())
        measures = "answers/s of long forced answers, 16 a call and all in one call; peak GPU memory"
        billions = round(sum(p.numel() for p in model.parameters()) / 1e9, 2)
        rows.append({"section": "decode", "model": DECODER["name"], "parameters_b": billions, "measures": measures})
    for section, name, measures in (
        ("vlm", FILTER_VLM, "HumbleBench questions/s at 640x480 and VLM filter images/s at the render size"),
        ("protoscore", PROTOSCORE_VLM, "seconds per optimizer step of the LoRA training"),
    ):
        if section in sections:
            rows.append(
                {
                    "section": section,
                    "model": name,
                    "parameters_b": round(vlm_parameters(name) / 1e9, 2),
                    "measures": measures + "; peak GPU memory",
                }
            )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    columns = [
        c
        for c in (
            "section",
            "model",
            "arm",
            "items_per_second",
            "overhead",
            "gain",
            "seconds",
            "peak_gib",
            "weights_gb",
            "parameters_b",
            "measures",
            "error",
        )
        if any(c in r for r in rows)
    ]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("" if r.get(c) is None else str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry", action="store_true", help="build on the meta device and say what would be measured")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    batch = PAPER["image_stage"]["render_batch_size"]
    parser.add_argument(
        "--images",
        type=int,
        default=3 * batch,
        help="images per T2I arm and round: three render batches, so the "
        "PNG writes of one overlap the next (default %(default)s)",
    )
    parser.add_argument("--items", type=int, default=32, help="questions and images per VLM arm and round")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2, help="ProtoScore optimizer steps")
    parser.add_argument("--answers", type=int, default=128, help="long answers the decoding arm makes")
    parser.add_argument("--answer-tokens", type=int, default=256, help="tokens in each of them")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "gpu_check.json")
    args = parser.parse_args(argv)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "dry": args.dry,
        "rows": [],
    }
    if args.dry:
        report["rows"] = dry(args.sections)
    else:
        if device != "cuda":
            print("gpu_check: no GPU here; run it with --dry to see what it measures", file=sys.stderr)
            return 2
        runs = {
            "t2i": lambda: t2i(device, args.images, args.rounds),
            "vlm": lambda: vlm(device, args.items, args.rounds),
            "protoscore": lambda: protoscore(device, args.steps),
            "decode": lambda: decode(device, args.answers, args.answer_tokens, PAPER["humblebench"]["batch_size"]),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        for section in args.sections:
            try:
                for rows in runs[section]():  # a model's rows as it finishes: written at once
                    report["rows"] += rows
                    args.out.write_text(json.dumps(report, indent=2))
            except Exception as error:  # one model's failure must not lose the others' rows
                report["rows"].append({"section": section, "error": f"{type(error).__name__}: {error}"[:300]})
            args.out.write_text(json.dumps(report, indent=2))
            free(device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"gpu_check on {report['device']} (torch {report['torch']}){', dry run' if args.dry else ''}:")
    print(table(report["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
