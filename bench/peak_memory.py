"""Peak memory of every model stage on a shard of N items and on one of 4N: it must follow the batch,
not the shard, so the ratio must stay under 1.2 (the script exits 1 otherwise).

Every run is the stage's own step (`blindspot.stages`) in a fresh process that reports its peak
resident memory (Linux's VmHWM). The models are the tiny preset's, built here; the images are noise PNGs
of --image-size pixels, which do not compress, so a stage that kept its shard's images would show it:
at the defaults, the 4N shard's 384 images take 680 MB decoded, the N shard's 96 take 170 MB, against
about 1.3 GB for Python, torch and a tiny model (the code before the batch loader scored 1.23 to 1.45 here).
Items are triplets (render_images, check_prompt_quality), images (judge_images), pairs (the metric,
quality and ProtoScore stages), questions (answer_humble) or scene-graph images (write_scene_questions).
Two slow stages get a share of N (SHARE), which the table shows.
Run: .venv/bin/python bench/peak_memory.py [--items 48] [--image-size 768] [--stages NAME ...] [--resources DIR]
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from tiny_preset import REPO, build_models, tiny_config

from blindspot import tables
from blindspot.config import validate_config
from blindspot.io import write_table
from blindspot.split import split_of
from blindspot.taxonomy import sample_seeds

LIMIT = 1.2  # peak memory at 4N over that at N: at or above it, memory grows with the shard
DOMAIN, T2I, VLM, SHARD = "animals", "tiny-flux", "tiny-qwen2.5-vl", "00000"
ANSWER_SETTING = "original"
SCENE_GRAPHS = {
    "describer": VLM, "writer": "smollm2-135m", "writer_max_tokens": 24, "cue_tokens": 4,
    "cue_instruction": "Describe the colour and material of the {category} in a few words.",
    "template": "config/prompts/humble_scene_questions_v1.yaml", "verification": None,
}  # fmt: skip
OPTIONS = ["a penguin", "a robin", "a heron", "a sparrow", "None of the above"]
# On a CPU, a tiny FLUX takes minutes per batch of four 768-px images, and the question writer decodes
# under a grammar, slowly: these stages get one item per SHARE of N.
SHARE = {"render_images": 16, "write_scene_questions": 8}
OBJECTS = 12  # per scene image (PSG's have about ten), each cropped and described


def items_of(stage: str, n: int) -> int:
    return max(1, n // SHARE.get(stage, 1))


def bench_config(resources: Path, items: int, image_size: int) -> dict:
    """The tiny preset, its shard holding every item, rendering at the benchmark's image size."""
    config = tiny_config(resources)
    config["shard_size"] = 4 * items
    config["models"][T2I]["render"] |= {"height": image_size, "width": image_size}
    config["humblebench"]["answer_shards"] = 1
    config["protoscore"]["checkpoint_every"] = 4 * items  # held-out accuracy once, at the end
    return config


def noise_pngs(folder: Path, count: int, size: int) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for index in range(count):
        path = folder / f"{index:04d}.png"
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    return paths


def test_triplet_ids(config: dict, count: int) -> list[str]:
    """Triplet ids that the benchmark's split puts in the test set, which score_metric scores."""
    fraction = config["benchmark"]["test_fraction"]
    candidates = (f"triplet-{i:05d}" for i in range(100 * count))
    return [t for t in candidates if split_of(t, config["seed"], fraction) == "test"][:count]


def write_inputs(config: dict, folder: Path, n: int, images: list[str]) -> dict[str, str]:
    """Every input table of n items; pair i shows images 2i (I_corr) and 2i + 1 (I_adv)."""
    folder.mkdir(parents=True)
    seeds = sample_seeds(config["domains"][DOMAIN]["taxonomy"], DOMAIN, n, config["seed"])
    triplets = seeds.assign(
        triplet_id=test_triplet_ids(config, n), generator="smollm2-135m", neutral_prompt=seeds["draft_neutral"],
        correct_description=seeds["draft_correct"], adversarial_description=seeds["draft_adversarial"],
        generator_model_id="built:smollm2-135m", generate_template_version="v1", judges="smollm2-135m",
    )[tables.TRIPLETS.names]  # fmt: skip
    corr, adv = images[0 : 2 * n : 2], images[1 : 2 * n : 2]
    pairs = pd.DataFrame({
        "pair_id": [f"pair-{i:05d}" for i in range(n)], "triplet_id": triplets["triplet_id"], "t2i": T2I,
        "seed": range(n), "corr_image_id": [Path(p).stem for p in corr], "corr_path": corr,
        "adv_image_id": [Path(p).stem for p in adv], "adv_path": adv, "vlm_scores": "{}",
        "min_corr_score": 9.0, "min_adv_score": 9.0, "kept": True,
    })  # fmt: skip
    renders = pd.DataFrame([
        {"image_id": getattr(pair, f"{role}_image_id"), "triplet_id": pair.triplet_id, "role": role,
         "description": getattr(triplet, f"{column}_description"), "t2i": T2I, "model_id": f"built:{T2I}",
         "model_revision": "", "seed": pair.seed, "steps": 2, "guidance": 0.0, "height": 0, "width": 0,
         "settings": "{}", "path": getattr(pair, f"{role}_path"), "sha256": ""}
        for pair, triplet in zip(pairs.itertuples(), triplets.itertuples(), strict=True)
        for role, column in (("corr", "correct"), ("adv", "adversarial"))
    ])  # fmt: skip
    benchmark = pairs.drop(columns="kept").merge(triplets, on="triplet_id").assign(split="train")
    questions = pd.DataFrame({
        "question_id": [f"question-{i:05d}" for i in range(n)], "source": "benchmark",
        "question": "Which of these is in the image?", "options": json.dumps(OPTIONS), "label": "A",
        "type": "Object", "image_path": corr, "origin": "{}", "verified": True,
    })  # fmt: skip
    side = Image.open(images[0]).width  # objects of a scene: nested boxes from the whole image down
    boxes = [[k * side // 32, k * side // 32, side - k * side // 32, side - k * side // 32] for k in range(OBJECTS)]
    graphs = [
        {"image_id": Path(path).stem, "file_name": path,
         "objects": [{"id": k, "category": f"thing {k}", "bbox": box} for k, box in enumerate(boxes)],
         "relations": [{"subject": 0, "predicate": "holds", "object": 1}]}
        for path in corr[: items_of("write_scene_questions", n)]
    ]  # fmt: skip
    transfer = pd.DataFrame({"prompt": triplets["neutral_prompt"], "preferred": corr, "other": adv})
    tables_of = {
        "seeds": (seeds, tables.SEEDS), "triplets": (triplets, tables.TRIPLETS),
        "render_triplets": (triplets[: items_of("render_images", n)], tables.TRIPLETS), "pairs": (pairs, tables.PAIRS),
        "renders": (renders, tables.RENDERS), "benchmark": (benchmark, tables.BENCHMARK_PAIRS),
        "questions": (questions, tables.HUMBLE_QUESTIONS),
    }  # fmt: skip
    paths = {name: str(folder / f"{name}.parquet") for name in tables_of}
    for name, (frame, schema) in tables_of.items():
        write_table(paths[name], frame[schema.names], schema)
    paths["scene_graphs"] = str(folder / "scene_graphs.json")
    Path(paths["scene_graphs"]).write_text(json.dumps({"images": graphs}))
    paths["transfer"] = str(folder / "transfer.csv")
    transfer.to_csv(paths["transfer"], index=False)
    return paths


def stage_runs(config: dict, trained: str) -> dict[str, tuple[str, Callable[[dict, Path], dict]]]:
    """Each benchmarked stage: its step and its arguments from the inputs and an output folder."""
    runs = {
        "render_images": ("render_images", lambda i, o: {
            "domain": DOMAIN, "t2i": T2I, "shard": SHARD, "triplets": i["render_triplets"], "seeds": i["seeds"],
            "images_dir": str(o / "images"), "out": str(o / "renders.parquet"), "counters_out": str(o / "c.json")}),
        "judge_images": ("judge_images", lambda i, o: {
            "domain": DOMAIN, "t2i": T2I, "vlm": VLM, "shard": SHARD, "renders": i["renders"],
            "out": str(o / "scores.parquet"), "counters_out": str(o / "c.json")}),
        "measure_image_quality": ("measure_image_quality", lambda i, o: {
            "shard": SHARD, "pairs": i["pairs"], "triplets": i["triplets"], "seeds": i["seeds"],
            "out": str(o / "quality.parquet")}),
        "check_prompt_quality": ("check_prompt_quality", lambda i, o: {
            "triplets": i["triplets"], "out": str(o / "quality.parquet")}),
        "answer_humble": ("answer_humble", lambda i, o: {
            "vlm": VLM, "setting": ANSWER_SETTING, "shard": "0", "questions": i["questions"],
            "templates": [config["humblebench"]["settings"][ANSWER_SETTING]["template"]],
            "out": str(o / "answers.parquet"), "counters_out": str(o / "c.json")}),
        "write_scene_questions": ("write_scene_questions", lambda i, o: {
            "scene_graphs": i["scene_graphs"], "out": str(o / "questions.parquet"),
            "verification_out": str(o / "verify.csv"), "counters_out": str(o / "c.json")}),
        "train_protoscore": ("train_protoscore", lambda i, o: {
            "benchmark": i["benchmark"], "checkpoint": str(o / "checkpoint"), "out": str(o / "trained")}),
        "score_transfer": ("score_transfer", lambda i, o: {
            "transfer": i["transfer"], "trained": trained, "out": str(o / "transfer.csv")}),
    }  # fmt: skip
    for metric, entry in config["evaluation"]["metrics"].items():
        if entry["plugin"] == "api_judge":  # needs a server (tests/test_api_judge.py runs one)
            continue
        runs[f"score_metric:{metric}"] = ("score_metric", lambda i, o, metric=metric, entry=entry: {
            "domain": DOMAIN, "metric": metric, "shard": SHARD, "pairs": i["pairs"], "triplets": i["triplets"],
            "seeds": i["seeds"], "cache": str(o / "cache"), "trained": [trained] if entry["plugin"] == "protoscore"
            else [], "out": str(o / "scores.parquet"), "counters_out": str(o / "c.json")})  # fmt: skip
    return runs


def models_of(config: dict, stage: str) -> set[str]:
    """The registry models a benchmarked stage loads."""
    if stage.startswith("score_metric:"):
        entry = config["evaluation"]["metrics"][stage.split(":")[1]]
        return {entry["model"], *entry.get("models", {}).values()}
    image_stage, prompt_stage = config["image_stage"], config["prompt_stage"]
    return {
        "render_images": {T2I}, "judge_images": {VLM}, "measure_image_quality": set(image_stage["iqa_metrics"]),
        "check_prompt_quality": {prompt_stage["embedding_model"], prompt_stage["nli_model"]}, "answer_humble": {VLM},
        "write_scene_questions": {SCENE_GRAPHS["describer"], SCENE_GRAPHS["writer"]},
        "train_protoscore": {config["protoscore"]["model"]}, "score_transfer": {config["protoscore"]["model"]},
    }[stage]  # fmt: skip


def run_config(config: dict, step: str, inputs: dict[str, str]) -> dict:
    """The config a step runs with: write_scene_questions's names the scene graphs of its shard."""
    if step != "write_scene_questions":
        return config
    scene_graphs = SCENE_GRAPHS | {"file": inputs["scene_graphs"]}
    return config | {"humblebench": config["humblebench"] | {"scene_graphs": scene_graphs}}


def peak_rss_mb(step: str, config: dict, arguments: dict, folder: Path) -> tuple[float, float]:
    """(peak resident memory in MB, seconds) of one run of `step` in a fresh process."""
    folder.mkdir(parents=True)
    request = folder / "request.json"
    request.write_text(json.dumps({"step": step, "config": config, "arguments": arguments}))
    started = time.perf_counter()
    result = subprocess.run([sys.executable, __file__, "--child", str(request)], cwd=REPO, capture_output=True,
                            text=True)  # fmt: skip
    seconds = time.perf_counter() - started
    if result.returncode:
        log = (folder / "stage.log").read_text() if (folder / "stage.log").exists() else result.stderr
        raise RuntimeError(f"{step} failed in {folder}:\n{log[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_rss_kb"] / 1024, seconds


def run_child(request_path: str) -> None:
    """One stage in this process; its peak resident memory is the last line printed. That is the
    kernel's high-water mark of this program (VmHWM): getrusage's ru_maxrss would start from the
    parent's, which Linux carries across exec."""
    from blindspot.stages import STEPS, setup_logging

    request = json.loads(Path(request_path).read_text())
    setup_logging(str(Path(request_path).parent / "stage.log"))
    STEPS[request["step"]](config=request["config"], **request["arguments"])
    status = Path("/proc/self/status").read_text()
    print(json.dumps({"peak_rss_kb": int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)[1])}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=48, help="N: items in the small shard (default 48)")
    parser.add_argument("--image-size", type=int, default=768, help="side of every image in pixels (default 768)")
    parser.add_argument("--stages", nargs="+", help="only these (names as in the table)")
    parser.add_argument(
        "--resources", help="build the tiny models here, once, and reuse them (default: a temporary folder)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child)
        return
    with tempfile.TemporaryDirectory(prefix="peak-memory-") as work:
        work = Path(work)
        config = bench_config(Path(args.resources or work / "resources").resolve(), args.items, args.image_size)
        validate_config(config)
        trained = str(work / "trained")
        runs = stage_runs(config, trained)
        chosen = args.stages or list(runs)
        unknown = set(chosen) - set(runs)
        if unknown:
            parser.error(f"unknown stages {sorted(unknown)}; known: {', '.join(runs)}")
        needs_trained = any(stage in chosen for stage in ("score_transfer", "score_metric:protoscore"))
        loading = set(chosen) | ({"train_protoscore"} if needs_trained else set())
        build_models(config, set().union(*(models_of(config, stage) for stage in loading)))
        (work / "images").mkdir()
        images = noise_pngs(work / "images", 8 * args.items, args.image_size)
        sizes = {n: write_inputs(config, work / f"inputs-{n}", n, images) for n in (args.items, 4 * args.items)}
        if needs_trained:  # the scorer that score_transfer and ProtoScore's Table 3 row read
            step, arguments = runs["train_protoscore"]
            peak_rss_mb(step, config, arguments(sizes[args.items], work / "train") | {"out": trained}, work / "train")
        print(f"{'stage':30} {'items':>6} {'peak MB at N':>13} {'peak MB at 4N':>14} {'ratio':>6} {'seconds':>8}")
        worst = 0.0
        for stage in chosen:
            step, arguments = runs[stage]
            peaks, seconds = [], 0.0
            for n, inputs in sizes.items():
                folder = work / "runs" / stage.replace(":", "-") / str(n)
                peak, took = peak_rss_mb(step, run_config(config, step, inputs), arguments(inputs, folder), folder)
                peaks.append(peak)
                seconds += took
            ratio = peaks[1] / peaks[0]
            worst = max(worst, ratio)
            items = items_of(stage, args.items)
            print(f"{stage:30} {items:>6} {peaks[0]:>13.0f} {peaks[1]:>14.0f} {ratio:>6.2f} {seconds:>8.0f}",
                  flush=True)  # fmt: skip
        verdict = "bounded by the batch" if worst < LIMIT else "NOT bounded by the batch"
        print(f"worst ratio {worst:.2f} (limit {LIMIT}): memory is {verdict} ({args.image_size}-px images)")
        if worst >= LIMIT:
            sys.exit(1)


if __name__ == "__main__":
    main()
