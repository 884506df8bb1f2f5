"""Peak memory of every model stage on a shard of N items and on one of 4N: it must follow the batch,
not the shard, so the ratio must stay under 1.2 (the script exits 1 otherwise).

Every run is the stage's real job, as the workflow would run it. Each shard size has its own config (the
tiny preset with one domain of N or 4N seeds, in one shard, and its own `results_dir`); its input tables
are written where the workflow keeps them (`blindspot.targets`), with the scene graphs and the transfer
set at the files the config names and a trained ProtoScore where its readers look. The job's arguments
come from the workflow's own DAG (`blindspot.dag.job_arguments`), and `blindspot.steps.run_step` runs it
in a fresh process that reports its peak resident memory (Linux's VmHWM). The models are the tiny
preset's, built here; the images are noise PNGs of --image-size pixels, which do not compress, so a stage
that kept its shard's images would show it: at the defaults, the 4N shard's 384 images take 680 MB
decoded, the N shard's 96 take 170 MB, against about 1.3 GB for Python, torch and a tiny model (the code
before the batch loader scored 1.23 to 1.45 here). Items are triplets (render_images,
check_prompt_quality), images (judge_images), pairs (the metric, quality and ProtoScore stages), questions
(answer_humble) or scene-graph images (write_scene_questions). Two slow stages get a share of N (SHARE),
which the table shows: render_images through a config of its own with that many seeds, and
write_scene_questions through a scene-graph file of that many images.
Run: .venv/bin/python bench/peak_memory.py [--items 48] [--image-size 768] [--stages NAME ...] [--resources DIR]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from PIL import Image
from tiny_preset import REPO, build_models, tiny_config

from blindspot import catalogue, schemas, targets
from blindspot.io import write_table
from blindspot.protobias.split import split_of
from blindspot.protobias.taxonomy import sample_seeds
from blindspot.registry import is_api_metric

LIMIT = 1.2  # peak memory at 4N over that at N: at or above it, memory grows with the shard
DOMAIN, T2I, VLM, SHARD = "animals", "tiny-flux", "tiny-qwen2.5-vl", "00000"
ANSWER_SETTING = "original"
SCENE_GRAPHS = {
    "describer": VLM,
    "writer": "smollm2-135m",
    "writer_max_tokens": 24,
    "cue_tokens": 4,
    "cue_instruction": "Describe the colour and material of the {category} in a few words.",
    "template": "config/prompts/humble_scene_questions_v1.yaml",
    "verification": None,
}
OPTIONS = ["a penguin", "a robin", "a heron", "a sparrow", "None of the above"]
# On a CPU, a tiny FLUX takes minutes per batch of four 768-px images, and the question writer decodes
# under a grammar, slowly: these stages get one item per SHARE of N.
SHARE = {"render_images": 16, "write_scene_questions": 8}
OBJECTS = 12  # per scene image (PSG's have about ten), each cropped and described
# Stages whose job reads the trained ProtoScore.
READS_TRAINED = ("score_transfer", "score_metric:protoscore")


def items_of(stage: str, n: int) -> int:
    return max(1, n // SHARE.get(stage, 1))


def bench_config(resources: Path, items: int, image_size: int, work: Path, n: int) -> dict:
    """The tiny preset for a shard of n items: one domain of n seeds in one shard (the same shard size at
    N and 4N), rendering at the benchmark's image size, its results in a folder of its own. Its
    scene-graph file and transfer set are named here and written by `write_inputs`."""
    config = tiny_config(resources)
    config["results_dir"] = str(work / f"results-{n}")
    config["domains"] = {DOMAIN: config["domains"][DOMAIN] | {"n_seeds": n}}
    config["shard_size"] = 4 * items
    config["models"][T2I]["render"] |= {"height": image_size, "width": image_size}
    humble = config["humblebench"]
    humble["answer_shards"] = 1
    humble["scene_graphs"] = SCENE_GRAPHS | {"file": str(work / f"inputs-{n}" / "scene_graphs.json")}
    protoscore = config["protoscore"]
    protoscore["checkpoint_every"] = 4 * items  # held-out accuracy once, at the end
    protoscore["transfer"] = str(work / f"inputs-{n}" / "transfer.csv")
    return config


def render_config(config: dict, n: int) -> dict:
    """render_images's own config for a shard of n items: its share of n seeds, its own results."""
    seeds = items_of("render_images", n)
    domains = {DOMAIN: config["domains"][DOMAIN] | {"n_seeds": seeds}}
    return config | {"results_dir": f"{config['results_dir']}-render", "domains": domains}


def noise_pngs(folder: Path, count: int, size: int) -> list[str]:
    folder.mkdir(parents=True)
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


def write_table_at(config: dict, kind: str, frame: pd.DataFrame, schema: pa.Schema, **fields: str) -> None:
    write_table(targets.path(config, kind, **fields), frame[schema.names], schema)


def write_prompt_tables(config: dict) -> pd.DataFrame:
    """The domain's seeds and one accepted triplet per seed, where the workflow keeps them; the triplets."""
    n = config["domains"][DOMAIN]["n_seeds"]
    seeds = sample_seeds(config["domains"][DOMAIN]["taxonomy"], DOMAIN, n, config["seed"])
    triplets = seeds.assign(
        triplet_id=test_triplet_ids(config, n),
        generator="smollm2-135m",
        neutral_prompt=seeds["draft_neutral"],
        correct_description=seeds["draft_correct"],
        adversarial_description=seeds["draft_adversarial"],
        generator_model_id="built:smollm2-135m",
        generate_template_version="v1",
        judges="smollm2-135m",
    )
    write_table_at(config, "seeds", seeds, schemas.SEEDS, domain=DOMAIN)
    write_table_at(config, "triplets", triplets, schemas.TRIPLETS, domain=DOMAIN)
    return triplets[schemas.TRIPLETS.names]


def write_inputs(config: dict, images: list[str]) -> None:
    """Every input of the benchmarked jobs of a config's n items, at the paths the workflow reads them
    from; pair i shows images 2i (I_corr) and 2i + 1 (I_adv)."""
    n = config["domains"][DOMAIN]["n_seeds"]
    triplets = write_prompt_tables(config)
    corr, adv = images[0 : 2 * n : 2], images[1 : 2 * n : 2]
    pairs = pd.DataFrame(
        {
            "pair_id": [f"pair-{i:05d}" for i in range(n)],
            "triplet_id": triplets["triplet_id"],
            "t2i": T2I,
            "seed": range(n),
            "corr_image_id": [Path(p).stem for p in corr],
            "corr_path": corr,
            "adv_image_id": [Path(p).stem for p in adv],
            "adv_path": adv,
            "vlm_scores": "{}",
            "min_corr_score": 9.0,
            "min_adv_score": 9.0,
            "kept": True,
        }
    )
    renders = pd.DataFrame(
        [
            {
                "image_id": getattr(pair, f"{role}_image_id"),
                "triplet_id": pair.triplet_id,
                "role": role,
                "description": getattr(triplet, f"{column}_description"),
                "t2i": T2I,
                "model_id": f"built:{T2I}",
                "model_revision": "",
                "seed": pair.seed,
                "steps": 2,
                "guidance": 0.0,
                "height": 0,
                "width": 0,
                "settings": "{}",
                "path": getattr(pair, f"{role}_path"),
                "sha256": "",
            }
            for pair, triplet in zip(pairs.itertuples(), triplets.itertuples(), strict=True)
            for role, column in (("corr", "correct"), ("adv", "adversarial"))
        ]
    )
    benchmark = pairs.drop(columns="kept").merge(triplets, on="triplet_id").assign(split="train")
    questions = pd.DataFrame(
        {
            "question_id": [f"question-{i:05d}" for i in range(n)],
            "source": "benchmark",
            "question": "Which of these is in the image?",
            "options": json.dumps(OPTIONS),
            "label": "A",
            "type": "Object",
            "image_path": corr,
            "origin": "{}",
            "verified": True,
        }
    )
    write_table_at(config, "pairs", pairs, schemas.PAIRS, domain=DOMAIN)
    write_table_at(config, "renders", renders, schemas.RENDERS, domain=DOMAIN, t2i=T2I, shard=SHARD)
    write_table_at(config, "benchmark_pairs", benchmark, schemas.BENCHMARK_PAIRS)
    write_table_at(config, "humble_questions", questions, schemas.HUMBLE_QUESTIONS)
    side = Image.open(images[0]).width  # objects of a scene: nested boxes from the whole image down
    boxes = [[k * side // 32, k * side // 32, side - k * side // 32, side - k * side // 32] for k in range(OBJECTS)]
    graphs = [
        {
            "image_id": Path(path).stem,
            "file_name": path,
            "objects": [{"id": k, "category": f"thing {k}", "bbox": box} for k, box in enumerate(boxes)],
            "relations": [{"subject": 0, "predicate": "holds", "object": 1}],
        }
        for path in corr[: items_of("write_scene_questions", n)]
    ]
    scene_graphs = Path(config["humblebench"]["scene_graphs"]["file"])
    scene_graphs.parent.mkdir(parents=True, exist_ok=True)
    scene_graphs.write_text(json.dumps({"images": graphs}))
    transfer = pd.DataFrame({"prompt": triplets["neutral_prompt"], "preferred": corr, "other": adv})
    transfer.to_csv(config["protoscore"]["transfer"], index=False)


def stage_jobs(config: dict) -> dict[str, tuple[str, dict[str, str]]]:
    """Each benchmarked stage: the step and the wildcards of its job."""
    shard = {"domain": DOMAIN, "shard": SHARD}
    jobs = {
        "render_images": ("render_images", shard | {"t2i": T2I}),
        "judge_images": ("judge_images", shard | {"t2i": T2I, "vlm": VLM}),
        "measure_image_quality": ("measure_image_quality", shard),
        "check_prompt_quality": ("check_prompt_quality", {"domain": DOMAIN}),
        "answer_humble": ("answer_humble", {"vlm": VLM, "setting": ANSWER_SETTING, "shard": SHARD}),
        "write_scene_questions": ("write_scene_questions", {}),
        "train_protoscore": ("train_protoscore", {}),
        "score_transfer": ("score_transfer", {}),
    }
    for metric in config["evaluation"]["metrics"]:
        if not is_api_metric(config, metric):  # an API judge needs a server (tests/metrics/test_api_judge.py runs one)
            jobs[f"score_metric:{metric}"] = ("score_metric", shard | {"metric": metric})
    return jobs


def peak_rss_mb(config: dict, step: str, wildcards: dict[str, str], folder: Path) -> tuple[float, float]:
    """(peak resident memory in MB, seconds) of one job of `step`, with the arguments the workflow would
    give it, in a fresh process."""
    from blindspot.dag import job_arguments

    folder.mkdir(parents=True)
    request = folder / "request.json"
    request.write_text(json.dumps({"step": step, "arguments": job_arguments(config, step, wildcards)}))
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, __file__, "--child", str(request)], cwd=REPO, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if result.returncode:
        log = (folder / "stage.log").read_text() if (folder / "stage.log").exists() else result.stderr
        raise RuntimeError(f"{step} failed in {folder}:\n{log[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_rss_kb"] / 1024, seconds


def train_once(configs: list[dict], folder: Path) -> None:
    """The ProtoScore that score_transfer and ProtoScore's Table 3 row read, where each config's jobs read
    it: trained on the N shard (unless train_protoscore, benchmarked, left one) and copied to the rest."""
    trained = Path(targets.path(configs[0], "protoscore"))
    if not trained.exists():
        peak_rss_mb(configs[0], "train_protoscore", {}, folder)
    for config in configs[1:]:
        if not Path(targets.path(config, "protoscore")).exists():
            shutil.copytree(trained, targets.path(config, "protoscore"))


def run_child(request_path: str) -> None:
    """One job in this process; its peak resident memory is the last line printed. That is the kernel's
    high-water mark of this program (VmHWM): getrusage's ru_maxrss would start from the parent's, which
    Linux carries across exec."""
    from blindspot.steps import run_step, setup_logging

    request = json.loads(Path(request_path).read_text())
    setup_logging(str(Path(request_path).parent / "stage.log"))
    run_step(request["step"], **request["arguments"])
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
    resources = Path(args.resources).resolve() if args.resources else None
    # The workflow's relative paths (taxonomies, templates) are relative to the checkout, as for `snakemake`.
    os.chdir(REPO)
    with tempfile.TemporaryDirectory(prefix="peak-memory-") as work:
        work = Path(work)
        sizes = (args.items, 4 * args.items)
        resources = resources or work / "resources"
        configs = {n: bench_config(resources, args.items, args.image_size, work, n) for n in sizes}
        jobs = stage_jobs(configs[args.items])
        unknown = set(args.stages or []) - set(jobs)
        if unknown:
            parser.error(f"unknown stages {sorted(unknown)}; known: {', '.join(jobs)}")
        chosen = [stage for stage in jobs if not args.stages or stage in args.stages]  # in order: training first
        config = configs[args.items]  # score_transfer and ProtoScore's row load the model train_protoscore trains
        build_models(config, {name for stage in chosen for name in catalogue.job_models(config, *jobs[stage])})
        images = noise_pngs(work / "images", 8 * args.items, args.image_size)
        for n in sizes:
            write_inputs(configs[n], images)
            write_prompt_tables(render_config(configs[n], n))
        print(f"{'stage':30} {'items':>6} {'peak MB at N':>13} {'peak MB at 4N':>14} {'ratio':>6} {'seconds':>8}")
        worst = 0.0
        for stage in chosen:
            step, wildcards = jobs[stage]
            if stage in READS_TRAINED:
                train_once([configs[n] for n in sizes], work / "runs" / "trained")
            peaks, seconds = [], 0.0
            for n in sizes:
                job_config = render_config(configs[n], n) if step == "render_images" else configs[n]
                folder = work / "runs" / stage.replace(":", "-") / str(n)
                peak, took = peak_rss_mb(job_config, step, wildcards, folder)
                peaks.append(peak)
                seconds += took
            ratio = peaks[1] / peaks[0]
            worst = max(worst, ratio)
            items = items_of(stage, args.items)
            print(
                f"{stage:30} {items:>6} {peaks[0]:>13.0f} {peaks[1]:>14.0f} {ratio:>6.2f} {seconds:>8.0f}", flush=True
            )
        verdict = "bounded by the batch" if worst < LIMIT else "NOT bounded by the batch"
        print(f"worst ratio {worst:.2f} (limit {LIMIT}): memory is {verdict} ({args.image_size}-px images)")
        if worst >= LIMIT:
            sys.exit(1)


if __name__ == "__main__":
    main()
