"""`blindspot plan`, `throughput` and `targets`: job counts as Snakemake plans them, GPU-hours, benchmark medians."""

import copy
import json
import math
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.workflow import REPO

from blindspot import catalogue, counts, plan, resources, targets
from blindspot.checks import validate_config
from blindspot.cli import main
from blindspot.config import ConfigError
from blindspot.io import write_json, write_table

BLINDSPOT = REPO / ".venv" / "bin" / "blindspot"
# Jobs of the paper run from scratch, Snakemake's less the target rule `all`: 506 since the seeds are sized
# for the paper's accepted triplets (1,955 + 2,018 + 1,511 seeds: 15 shards of 400, no longer 22); 1,226 since
# 16 of the paper's VLMs answer HumbleBench (16 x 6 settings x 8 shards = 768 answer jobs, where one VLM had 48);
# 1,227 with describe_humble_questions (Figure 2); 1,228 with sample_human_questions (Table 7's human study);
# 1,420 with the four proprietary VLMs answering through their APIs (4 x 6 settings x 8 shards); 1,422 with
# each benchmark's per-item records (write_protobias_records, write_humble_records); 1,470 with Phi-4-multimodal
# answering through vLLM with its vision LoRA (6 settings x 8 shards); 1,310 with the proprietary VLMs
# answering the Original setting only, as the paper's (4 x 1 setting x 8 shards); 1,311 with the items' viewer
# (build_item_view); 631 with one answer job per VLM and shard for every setting it answers (21 x 8 = 168, not
# 17 x 6 x 8 + 4 x 8 = 848).
JOBS = 631
# The paper plan's answer jobs (issue 45 asks for at most 200).
ANSWER_JOBS = 168
TSV_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time"


def dry_run_jobs(configfile: str) -> Counter:
    """Job counts per rule of a run from scratch (`--forceall`, so what is on disk does not matter)."""
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--forceall", "--configfile", configfile, "--quiet", "rules"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    stats = (result.stdout + result.stderr).split("Job stats:")[1].split("total")[0]
    return Counter({m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, flags=re.MULTILINE)})


@pytest.mark.integration
@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/tiny.yaml"])
def test_plan_job_counts_equal_snakemake_dry_run(configfile):
    config = yaml.safe_load((REPO / configfile).read_text())
    planned = Counter(plan.job_table(config)["rule"])
    assert planned + Counter(["all"]) == dry_run_jobs(configfile)


@pytest.mark.integration
def test_plan_outputs_gpus_and_benchmark_files_equal_snakemake_dry_run(paper_config):
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--forceall", "--configfile", "config/config.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    planned_by_snakemake = set()
    for block in re.split(r"^(?:local)?rule ", result.stdout + result.stderr, flags=re.MULTILINE)[1:]:
        fields = dict(re.findall(r"^\s+(output|benchmark|resources): (.+)$", block, flags=re.MULTILINE))
        if "output" in fields:
            asked = re.search(r"\bgpu=(\d+)", fields["resources"])  # a CPU job has no `gpu`
            gpu = int(asked[1]) if asked else 0
            planned_by_snakemake.add(
                (block.split(":", 1)[0], fields["output"].split(", ")[0], gpu, fields.get("benchmark"))
            )
    jobs = plan.job_table(paper_config)
    benchmarked = {rule for rule, _, _, bench in planned_by_snakemake if bench}
    ours = set()
    for _, job in jobs.iterrows():
        bench = str(plan.benchmark_file("results/benchmarks", job["rule"], job["job"]))
        ours.add((job["rule"], job["output"], int(job["gpus"]), bench if job["rule"] in benchmarked else None))
    assert len(planned_by_snakemake) == len(jobs) == JOBS
    assert ours == planned_by_snakemake
    assert jobs["rule"].isin(["answer_humble", "answer_api_humble"]).sum() == ANSWER_JOBS


def small_config(tiny_config: dict) -> dict:
    """One domain of 6 seeds in shards of 4 (4 + 2 seeds); only the generator (1 GPU) and T2I model (2) use GPUs."""
    config = copy.deepcopy(tiny_config)
    config["domains"] = {"animals": {"taxonomy": "config/taxonomy/animals.yaml", "n_seeds": 6}}
    config["shard_size"] = 4
    config["prompt_stage"]["judges"] = ["tiny-qwen2"]  # smollm2-135m also judges in the tiny preset
    config["image_stage"] |= {"t2i_models": ["tiny-flux"], "images_per_description": 2}
    config["models"]["smollm2-135m"] |= {"gpus": 1, "weights_gb": 0.5}
    config["models"]["tiny-flux"] |= {"gpus": 2, "weights_gb": 1.0}
    config["job_resources"] |= {"load_gb_per_second": 1.0, "engine_start_seconds": {"default": 5}}
    config["throughput"] = {"generate_triplets": {"smollm2-135m": 3.0}, "render_images": {"default": 1.5}}
    validate_config(config)
    return config


def test_gpu_hours_by_hand(tiny_config):
    config = small_config(tiny_config)
    result = plan.plan(config)
    rules = result["rules"].set_index("rule")
    # generate_triplets: (4 + 2) seeds x 3 s x 1 GPU = 18 s, and each of its 2 jobs loads the generator: its
    # 0.5 GB at 1 GB/s and 5 s to start, 5.5 s x 1 GPU: 11 s.
    assert rules.loc["generate_triplets", "jobs"] == 2
    assert rules.loc["generate_triplets", "load_gpu_hours"] == pytest.approx(11 / 3600)
    assert rules.loc["generate_triplets", "gpu_hours"] == pytest.approx((18 + 11) / 3600)
    # render_images: 2 descriptions x 1 generator x 2 images x (4 + 2) seeds = 24 images x 1.5 s x 2 GPUs = 72 s;
    # its 2 jobs each load 1 GB (1 s) and start (5 s) on 2 GPUs: 24 s.
    assert rules.loc["render_images", "items"] == 24
    assert rules.loc["render_images", "gpu_hours"] == pytest.approx((72 + 24) / 3600)
    # Every other job runs on the CPU (the tiny registry has gpus: 0): 0 hours, whatever the table says.
    assert rules.drop(["generate_triplets", "render_images"])["gpu_hours"].eq(0).all()
    assert result["total_gpu_hours"] == pytest.approx(125 / 3600)
    assert result["load_gpu_hours"] == pytest.approx(35 / 3600)
    assert result["missing"] == []
    stages = result["stages"].set_index("stage")["gpu_hours"]
    assert stages["prompts"] == pytest.approx(29 / 3600)
    assert stages["images"] == pytest.approx(96 / 3600)
    # a job asks for its loading and its work, with the margin: (5.5 s + 4 seeds x 3 s) x 3, at least runtime_min
    first = result["jobs"].query("rule == 'generate_triplets'").iloc[0]
    assert first["load_seconds"] == pytest.approx(5.5)


def test_the_physical_bound_by_hand(tiny_config):
    config = small_config(tiny_config)
    config["models"]["smollm2-135m"] |= {"dtype": "bfloat16"}  # 0.5 GB: 0.25 billion parameters
    config["models"]["tiny-flux"] |= {"params_b": 0.001}  # its denoiser, not its 1 GB of weights
    config["physical_bound"] = {
        "gpu": {"name": "a slow one", "bf16_tflops": 1, "memory_gb_per_second": 1},
        "compute_share": 0.5,
        "decode_batch": 2,
        "flops_per_parameter": {"render_images": 3},
        "tokens": {
            "generate_triplets": {"smollm2-135m": {"read": 10, "written": 4}},
            "render_images": {"default": {"read": 100}},
        },
    }
    validate_config(config)
    result = plan.plan(config)
    rules = result["rules"].set_index("rule")
    # A token through 0.25e9 parameters: 2 x 0.25e9 / (1e12 x 0.5) = 1 ms; a written one no sooner than the
    # 0.5 GB are read for 2 sequences: 0.5e9 / (1e9 x 2) = 250 ms. A seed: 10 x 1 ms + 4 x 250 ms; 6 seeds.
    assert rules.loc["generate_triplets", "bound_gpu_hours"] == pytest.approx(6 * 1.01 / 3600)
    assert rules.loc["generate_triplets", "bound_ratio"] == pytest.approx(29 / (6 * 1.01))
    # An image: 100 tokens x 3 operations x 1e6 parameters / 5e11; 24 images, whatever the 2 GPUs.
    assert rules.loc["render_images", "bound_gpu_hours"] == pytest.approx(24 * 100 * 3e6 / 5e11 / 3600)
    # A job on no GPU is bound by nothing; the total is every rule's.
    assert rules.drop(["generate_triplets", "render_images"])["bound_gpu_hours"].eq(0).all()
    assert pd.isna(rules.loc["make_seeds", "bound_ratio"])
    assert result["bound_gpu_hours"] == pytest.approx(rules["bound_gpu_hours"].sum())
    # A GPU rule without tokens has no bound, and neither has the total.
    del config["physical_bound"]["tokens"]["render_images"]
    unbound = plan.plan(config)
    assert pd.isna(unbound["rules"].set_index("rule").loc["render_images", "bound_gpu_hours"])
    assert pd.isna(unbound["bound_gpu_hours"])


def test_items_at_the_expected_shares_beside_their_upper_bound(tiny_config):
    """The triplets accepted thin what is rendered and judged; the pairs kept, what is measured, scored and
    trained on; a later filter VLM gets the pairs the earlier one passed (at the root of the pair share, each
    VLM alike) and the validation pool of the rest; an API metric its domain's annotated images, by its shards."""
    tiny_config["prompt_stage"]["expected_acceptance"] = 0.5
    tiny_config["image_stage"] |= {"expected_acceptance": 0.64, "filter_order": "sequential", "validation_pool": 0.1}
    shard = {"domain": "objects", "shard": "00000", "t2i": "tiny-flux"}

    def items(rule: str, **wildcards: str) -> tuple[float, int]:
        job = shard | wildcards
        return catalogue.expected_items(tiny_config, rule, job), catalogue.job_items(tiny_config, rule, job)

    expected, images = items("render_images")
    assert expected == 0.5 * images
    first, later = (items("judge_images", vlm=vlm) for vlm in tiny_config["image_stage"]["vlms"])
    assert first == (0.5 * images, images)
    assert later[1] == images
    assert later[0] == pytest.approx(0.5 * images * (0.8 + 0.1 * 0.2))
    tiny_config["image_stage"]["filter_order"] = "every"
    assert items("judge_images", vlm=tiny_config["image_stage"]["vlms"][1]) == (0.5 * images, images)
    expected, pair_images = items("score_metric", metric="clipscore")
    assert expected == pytest.approx(0.5 * 0.64 * pair_images)
    seeds, generated = items("generate_triplets", generator="smollm2-135m")
    assert seeds == generated  # nothing filters the seeds
    tiny_config["domains"]["objects"]["n_seeds"] = 3 * tiny_config["shard_size"]  # three shards
    annotated = 2 * tiny_config["benchmark"]["preference_pairs_per_domain"]
    api = [items("score_api_metric", metric="api-judge", shard=f"{n:05d}")[0] for n in range(3)]
    assert api == pytest.approx([annotated / 3] * 3)


@pytest.mark.parametrize("asked", ["annotated", "test_split"])
def test_an_api_metrics_jobs_plan_no_more_items_than_the_annotated_pairs(tiny_config, asked):
    """By default an API metric scores only the annotated pairs: a job's items (images, two per pair) are at
    most its domain's; with `evaluation.api_metrics_score: test_split` every pair of its shard, as any metric."""
    tiny_config["evaluation"]["api_metrics_score"] = asked
    annotated_images = 2 * tiny_config["benchmark"]["preference_pairs_per_domain"]
    items = {
        rule: catalogue.job_items(tiny_config, rule, {"domain": "objects", "metric": metric, "shard": "00000"})
        for rule, metric in (("score_api_metric", "api-judge"), ("score_metric", "clipscore"))
    }
    assert items["score_metric"] > annotated_images
    assert items["score_api_metric"] == (annotated_images if asked == "annotated" else items["score_metric"])


def test_missing_throughput_is_na_and_named(tiny_config):
    config = small_config(tiny_config)
    config["models"]["tiny-qwen2.5-vl"]["gpus"] = 1
    del config["throughput"]["render_images"]
    result = plan.plan(config)
    rules = result["rules"].set_index("rule")
    assert pd.isna(rules.loc["render_images", "gpu_hours"])
    assert pd.isna(rules.loc["judge_images", "gpu_hours"])
    assert rules.loc["generate_triplets", "gpu_hours"] == pytest.approx(29 / 3600)  # its work and its loading
    assert pd.isna(result["total_gpu_hours"])
    assert result["known_gpu_hours"] == pytest.approx(29 / 3600)
    # HumbleBench and the metrics on tiny-qwen2.5-vl (AlignScore's captioner too, and VQAScore's VLM variant;
    # VQAScore itself is CLIP-FlanT5's) now need GPUs, with no entry.
    assert result["missing"] == [
        "answer_humble.tiny-qwen2.5-vl",
        "judge_images.tiny-qwen2.5-vl",
        "render_images.tiny-flux",
        "score_metric.alignscore",
        "score_metric.vlm-judge",
        "score_metric.vqascore-vlm",
    ]


def test_throughput_entry_for_an_unknown_model_is_refused(tiny_config):
    config = small_config(tiny_config)
    config["throughput"]["render_images"] = {"tiny-flx": 1.0}
    with pytest.raises(ConfigError, match=r"throughput\.render_images\.tiny-flx"):
        plan.plan(config)


def test_schema_refuses_throughput_for_an_unknown_rule(tiny_config):
    config = small_config(tiny_config)
    config["throughput"]["render_image"] = {"default": 1.0}
    with pytest.raises(ConfigError, match="throughput"):
        validate_config(config)


def write_benchmark(path, seconds: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"{TSV_HEADER}\n{seconds}\t0:00:{int(seconds):02d}\t512.1\t1024.2\t400.0\t450.0\t1.0\t2.0\t95.0\t{seconds}\n"
    )


def test_throughput_medians_from_benchmark_files(tiny_config, tmp_path, capsys):
    config = small_config(tiny_config)
    config["results_dir"] = str(tmp_path / "results")
    bench = tmp_path / "results" / "benchmarks"
    # generate_triplets: shard 00000 has 4 seeds, 00001 has 2 (no outputs: the plan's seeds count).
    write_benchmark(bench / "generate_triplets" / "animals" / "smollm2-135m" / "00000.tsv", 8.0)  # 2 s/seed
    write_benchmark(bench / "generate_triplets" / "animals" / "smollm2-135m" / "00001.tsv", 10.0)  # 5 s/seed
    # judge_images with two VLMs on shard 00000; tiny-qwen2.5-vl's render shard has 3 rows on disk.
    write_benchmark(bench / "judge_images" / "animals" / "tiny-flux" / "tiny-qwen2.5-vl" / "00000.tsv", 6.0)
    write_benchmark(bench / "judge_images" / "animals" / "tiny-flux" / "tiny-internvl3" / "00000.tsv", 8.0)
    write_benchmark(bench / "judge_images" / "animals" / "tiny-flux" / "tiny-internvl3" / "00001.tsv", 16.0)
    # A resumed judge_images job (12 s) scored 4 of its 8 images itself: its counters say so.
    write_benchmark(bench / "judge_images" / "animals" / "tiny-flux" / "tiny-qwen2.5-vl" / "00001.tsv", 12.0)
    # A render job that found every image on disk did no work: it says nothing of the model's speed.
    write_benchmark(bench / "render_images" / "animals" / "tiny-flux" / "00000.tsv", 30.0)
    run = config | {"results_dir": str(tmp_path / "results")}
    scores = targets.path(run, "vlm_scores", domain="animals", t2i="tiny-flux", vlm="tiny-qwen2.5-vl", shard="00000")
    write_scores(scores, 3)
    resumed = {"domain": "animals", "t2i": "tiny-flux", "vlm": "tiny-qwen2.5-vl", "shard": "00001"}
    write_scores(targets.path(run, "vlm_scores", **resumed), 8)
    write_json(targets.path(run, "vlm_score_counters", **resumed), {"images": 8, "computed_items": 4})
    write_json(
        targets.path(run, "render_counters", domain="animals", t2i="tiny-flux", shard="00000"),
        {"images": 8, "reused": 8, "computed_items": 0},
    )
    measured = plan.measured_throughput(config, bench)
    assert len(measured) == 7
    table = plan.throughput_table(measured)
    # Median of 2 and 5 s per seed.
    assert table["generate_triplets"] == {"smollm2-135m": 3.5}
    # tiny-qwen2.5-vl: 6 s over the 3 rows of its output, and 12 s over the 4 images (not 8 rows) the
    # resumed job scored itself -> 2.0 and 3.0; tiny-internvl3: plan's 16 and 8 images -> 0.5 and 2.0.
    assert table["judge_images"] == {"tiny-qwen2.5-vl": 2.5, "tiny-internvl3": 1.25}
    assert "render_images" not in table
    assert sorted(measured["items_from"]) == ["counters", "counters", "output", "plan", "plan", "plan", "plan"]

    assert main(["throughput", "--configfile", str(write_config(config, tmp_path)), str(bench)]) == 0
    out = capsys.readouterr().out
    assert "counters) for 2 jobs, rows of its output parquet for 1, the plan's upper bound (no output" in out
    assert "1 jobs had no items of their own" in out
    pasted = yaml.safe_load(out)
    assert pasted["throughput"] == table
    validate_config(config | pasted)


def test_throughput_of_a_missing_or_unbenchmarked_folder_is_one_line(tiny_config, tmp_path, capsys):
    config = small_config(tiny_config)
    configfile = str(write_config(config, tmp_path))
    bench = tmp_path / "results" / "benchmarks"
    for folder, problem in (
        (bench, "no such folder (give the {results_dir}/benchmarks of a finished run)"),
        (
            tmp_path,
            "no benchmark file of this config's jobs (e.g. "
            f"{tmp_path / 'generate_triplets' / 'animals' / 'smollm2-135m' / '00000.tsv'})",
        ),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["throughput", "--configfile", configfile, str(folder)])
        assert exit_.value.code == 2
        assert capsys.readouterr().err == f"blindspot: error: {folder}: {problem}\n"  # the line alone, no usage


def test_throughput_names_a_file_it_cannot_read(tiny_config, tmp_path, capsys):
    config = small_config(tiny_config)
    config["results_dir"] = str(tmp_path / "results")
    configfile = str(write_config(config, tmp_path))
    bench = tmp_path / "results" / "benchmarks"
    job = {"domain": "animals", "t2i": "tiny-flux", "vlm": "tiny-qwen2.5-vl", "shard": "00000"}
    benchmark = bench / "judge_images" / "animals" / "tiny-flux" / "tiny-qwen2.5-vl" / "00000.tsv"
    write_benchmark(benchmark, 6.0)
    counters, scores = targets.path(config, "vlm_score_counters", **job), targets.path(config, "vlm_scores", **job)
    Path(scores).parent.mkdir(parents=True)
    Path(scores).write_bytes(b"not a parquet table")
    for path, content, problem in (
        (counters, b"[4]", "holds a JSON array where an object belongs"),
        (counters, b"{4", "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
        (scores, None, "not a parquet table ("),  # read once the job has no counters
        (benchmark, b"s\t\xff\n", "not a Snakemake benchmark file (not UTF-8 text: invalid start byte)"),
    ):
        if content is None:
            Path(counters).unlink()
        else:
            Path(path).write_bytes(content)
        with pytest.raises(SystemExit) as exit_:
            main(["throughput", "--configfile", configfile, str(bench)])
        assert exit_.value.code == 2
        assert capsys.readouterr().err.splitlines()[-1].startswith(f"blindspot: error: {path}: {problem}")
    with pytest.raises(SystemExit):
        main(["throughput", "--configfile", configfile, str(benchmark)])
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"blindspot: error: {benchmark}: not a folder (give")


def test_an_empty_or_header_only_benchmark_file_is_left_out(tiny_config, tmp_path, capsys):
    """A benchmark file without seconds (a job cut short as Snakemake wrote it) times nothing: left out, and
    counted, as a job without items of its own is."""
    config = small_config(tiny_config)
    bench = tmp_path / "results" / "benchmarks"
    shards = bench / "generate_triplets" / "animals" / "smollm2-135m"
    write_benchmark(shards / "00000.tsv", 8.0)  # 4 seeds: 2 s/seed
    (shards / "00001.tsv").write_text(f"{TSV_HEADER}\n")
    measured = plan.measured_throughput(config, bench)
    assert measured["seconds"].isna().tolist() == [False, True]
    assert plan.throughput_table(measured) == {"generate_triplets": {"smollm2-135m": 2.0}}
    (shards / "00001.tsv").write_text("")
    assert main(["throughput", "--configfile", str(write_config(config, tmp_path)), str(bench)]) == 0
    out = capsys.readouterr().out
    left_out = f"# 1 benchmark files had no seconds (empty, or a header only): left out, e.g. {shards / '00001.tsv'}."
    assert left_out in out
    assert yaml.safe_load(out) == {"throughput": {"generate_triplets": {"smollm2-135m": 2.0}}}


def write_scores(path: str, rows: int) -> None:
    from blindspot.schemas import VLM_SCORES

    frame = pd.DataFrame({field.name: [None] * rows for field in VLM_SCORES})
    write_table(path, frame, VLM_SCORES)


def write_config(config: dict, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_targets_for_one_domain_and_rule(paper_config, tmp_path, capsys):
    config = paper_config
    expected = sorted(
        targets.path(config, "renders", domain="animals", t2i=t2i, shard=f"{shard:05d}")
        for t2i in config["image_stage"]["t2i_models"]
        for shard in range(5)  # 1955 seeds in shards of 400
    )  # in the order of the jobs' names
    assert plan.select_targets(config, ["animals"], rules=["render_images"]) == expected
    assert (
        main(["targets", "--configfile", "config/config.yaml", "--domain", "animals", "--rule", "render_images"]) == 0
    )
    assert capsys.readouterr().out.splitlines() == expected
    # A model filter matches every job that uses the model, here the renders it judged.
    judged = plan.select_targets(config, ["objects"], ["internvl3-38b-instruct"])
    assert len(judged) == 3 * 4  # 3 T2I models x 1511 seeds in 4 shards of 400
    assert all("/vlm_scores/" in target and "/internvl3-38b-instruct/" in target for target in judged)


def test_targets_unknown_name_exits_2_listing_valid_ones(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["targets", "--configfile", "config/config.yaml", "--domain", "animals", "--rule", "render_image"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown rule render_image" in err
    assert "generate_triplets, judge_triplets, render_images, judge_images, measure_image_quality" in err
    with pytest.raises(SystemExit) as exit_info:
        main(["targets", "--configfile", "config/config.yaml", "--model", "flux"])
    assert exit_info.value.code == 2
    assert "flux.1-schnell" in capsys.readouterr().err


@pytest.mark.integration
def test_cli_plan_as_a_subprocess():
    result = subprocess.run(
        [str(BLINDSPOT), "plan", "--configfile", "config/config.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    total = re.search(
        r"^Total: (\d+) jobs, ([\d.]+) GPU-hours, ([\d.]+) of them loading models \(([\d.]+) at every candidate "
        r"kept\); the bound: ([\d.]+) GPU-hours$",
        result.stdout,
        flags=re.MULTILINE,
    )
    assert total, result.stdout
    expected = plan.plan(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    assert int(total[1]) == expected["total_jobs"] == JOBS
    assert float(total[2]) == pytest.approx(expected["total_gpu_hours"], abs=0.005)
    assert 0 < float(total[3]) == pytest.approx(expected["load_gpu_hours"], abs=0.005)
    # the filters thin what the later stages get; nothing is faster than its bound
    assert float(total[2]) < float(total[4]) == pytest.approx(expected["total_gpu_hours_upper"], abs=0.005)
    assert float(total[5]) == pytest.approx(expected["bound_gpu_hours"], abs=0.005)
    assert 0 < float(total[5]) < float(total[2])
    assert "| judge_images" in result.stdout
    csv = subprocess.run(
        [sys.executable, "-m", "blindspot.cli", "plan", "--configfile", "config/config.yaml", "--format", "csv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    frame = pd.read_csv(pd.io.common.StringIO(csv.stdout))
    assert frame.iloc[-1]["rule"] == "total"
    assert frame.iloc[-1]["jobs"] == JOBS


def test_the_readmes_cost_table_is_the_paper_plans(paper_config):
    """Each row of the README's cost table, and its total, as `blindspot plan` has them now."""
    text = (REPO / "README.md").read_text().split("<!-- cost:", 1)[1]
    rows = [line.strip("|").split("|") for line in text.split("\n\n", 1)[0].splitlines()[3:]]
    shown = {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows}
    result = plan.plan(paper_config)
    rules = result["rules"].set_index("rule")
    gpu_rules = rules[rules["gpu_hours"] > 0]
    assert set(shown) == {*gpu_rules.index, "total"}
    for rule, row in gpu_rules.iterrows():
        hours = [
            f"{row[column]:.2f}" for column in ("gpu_hours", "load_gpu_hours", "gpu_hours_upper", "bound_gpu_hours")
        ]
        assert shown[rule] == [str(row["jobs"]), *hours, f"{row['bound_ratio']:.1f}"], rule
    total = [result[key] for key in ("total_gpu_hours", "load_gpu_hours", "total_gpu_hours_upper", "bound_gpu_hours")]
    ratio = result["total_gpu_hours"] / result["bound_gpu_hours"]
    assert shown["total"] == [str(result["total_jobs"]), *(f"{hours:.2f}" for hours in total), f"{ratio:.1f}"]


def test_a_config_snakemake_cannot_plan_is_one_line_naming_the_file(tiny_config, tmp_path, capsys):
    # A missing file the config names is the config check's; a build's input only Snakemake sees.
    tiny_config["models"]["niqe"]["build"]["archive"] = "resources/downloads/nowhere.tar.gz"
    tiny_config["resources_dir"] = str(tmp_path / "resources")  # not this checkout's: NIQE is built there
    tiny_config["results_dir"] = str(tmp_path / "results")  # nor its results, which a quick start leaves there
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--configfile", str(write_config(tiny_config, tmp_path))])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.startswith("blindspot: error: Snakemake cannot plan this config: Missing input files")
    assert "resources/downloads/nowhere.tar.gz" in message


def counted_config(tiny_config: dict) -> dict:
    """small_config with acceptance shares and a paper block: 6 seeds x 1 generator x 0.5 = 3 triplets."""
    config = small_config(tiny_config)
    config["prompt_stage"]["expected_acceptance"] = 0.5
    config["image_stage"]["expected_acceptance"] = 0.25
    config["benchmark"]["test_fraction"] = 0.75
    config["paper"] = {"domains": {"animals": {"triplets": 4, "pairs": 10}}, "train_pairs": 3}
    validate_config(config)
    return config


def test_expected_counts_by_hand(tiny_config):
    expected = counts.expected_counts(counted_config(tiny_config)).set_index("domain")
    animals = expected.loc["animals"]
    assert (animals["seeds"], animals["candidate_triplets"], animals["triplets"]) == (6, 6, 3.0)
    # 3 triplets x 2 images per description x 1 T2I model = 6 candidate pairs, a quarter kept.
    assert animals["pairs"] == pytest.approx(1.5)
    assert animals["pairs_per_triplet"] == pytest.approx(0.5)
    assert animals["train_pairs"] == pytest.approx(1.5 * 0.25)
    assert (animals["paper_triplets"], animals["paper_pairs"], animals["paper_pairs_per_triplet"]) == (4, 10, 2.5)
    # The paper gives its train split for the whole benchmark only: on the total row.
    assert pd.isna(animals["paper_train_pairs"])
    assert expected.loc["total", "paper_train_pairs"] == 3
    assert expected.loc["total", "pairs"] == pytest.approx(1.5)


def test_without_a_share_or_a_paper_count_the_expected_counts_are_missing(tiny_config):
    config = counted_config(tiny_config)
    del config["image_stage"]["expected_acceptance"]
    config["domains"]["objects"] = {"taxonomy": "config/taxonomy/objects.yaml", "n_seeds": 2}
    config["paper"]["domains"]["animal"] = {"triplets": 1, "pairs": 1}  # a typo: not a domain of the run
    expected = counts.expected_counts(config).set_index("domain")
    assert expected.loc["objects", "triplets"] == 1.0
    assert expected[["pairs", "train_pairs"]].isna().all().all()
    assert pd.isna(expected.loc["objects", "paper_triplets"])
    assert pd.isna(expected.loc["total", "paper_triplets"])  # a total over a domain the paper does not count
    assert pd.isna(expected.loc["total", "paper_train_pairs"])  # the paper's train split is not this run's
    assert plan.plan(config)["paper_domains_not_run"] == ["animal"]


def test_a_bad_paper_count_is_refused_naming_its_key(tiny_config):
    config = counted_config(tiny_config)
    config["paper"]["domains"]["animals"]["triplets"] = "many"
    with pytest.raises(ConfigError, match=r"'paper\.domains\.animals\.triplets'"):
        validate_config(config)
    config = counted_config(tiny_config)
    config["image_stage"]["expected_acceptance"] = 1.5
    with pytest.raises(ConfigError, match=r"'image_stage\.expected_acceptance'"):
        validate_config(config)


def write_counters(path: str, counters: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(counters))


def test_measured_acceptance_comes_from_a_runs_counters_and_sizes_the_seeds(tiny_config, tmp_path):
    config = counted_config(tiny_config) | {"results_dir": str(tmp_path / "results")}
    config["domains"]["objects"] = {"taxonomy": "config/taxonomy/objects.yaml", "n_seeds": 2}
    write_counters(targets.path(config, "triplet_counters", domain="animals"), {"generated": 8, "accepted": 2})
    write_counters(targets.path(config, "pair_counters", domain="animals"), {"pairs_in": 10, "pairs_kept": 7})
    measured = counts.measured_acceptance(config).set_index("domain")
    assert measured.loc["animals"].tolist() == [0.25, 0.7]
    assert measured.loc["objects"].isna().all()  # no run of it yet
    table = counts.acceptance_table(config).set_index("domain")
    # The paper's 4 triplets from 1 generator at the measured quarter: 16 seeds; objects has no paper count.
    assert table.loc["animals", "seeds_for_paper"] == 16
    assert pd.isna(table.loc["objects", "seeds_for_paper"])
    assert table.loc["animals", ["triplets_assumed", "pairs_assumed"]].tolist() == [0.5, 0.25]


def test_seeds_for_rounds_up():
    assert counts.seeds_for(2932, 3, 0.5) == 1955  # 1954.7 seeds would fall short
    assert counts.seeds_for(3027, 3, 0.5) == 2018


def test_a_triplet_gives_the_planned_pairs(tiny_config):
    """The plan's pairs per triplet are what the pairing code makes of the renders of one triplet."""
    from blindspot.models.spec import model_spec
    from blindspot.protobias.consensus import pair_images
    from blindspot.protobias.render import plan_renders

    config = copy.deepcopy(tiny_config)
    config["image_stage"]["images_per_description"] = 3
    triplets = pd.DataFrame([{"triplet_id": "t1", "correct_description": "a bat", "adversarial_description": "a dog"}])
    renders = pd.DataFrame(
        [
            {
                "image_id": job.image_id,
                "triplet_id": job.triplet_id,
                "t2i": t2i,
                "seed": job.seed,
                "role": job.role,
                "path": str(job.path),
            }
            for t2i in config["image_stage"]["t2i_models"]
            for job in plan_renders(triplets, model_spec(config, t2i), Path("images"), 3, config["seed"])
        ]
    )
    models = len(config["image_stage"]["t2i_models"])
    assert models > 1
    assert len(pair_images(renders)) == catalogue.pairs_per_triplet(config) == 3 * models


def test_paper_config_is_sized_for_the_papers_counts(paper_config):
    """The seeds are sized for the paper's accepted triplets at the configured share, and the images per
    description for its pairs: the expected counts meet the paper's (8,225 triplets, 45,400 pairs, ~12k train)."""
    generators = len(paper_config["prompt_stage"]["generators"])
    share = paper_config["prompt_stage"]["expected_acceptance"]
    for domain, counted in paper_config["paper"]["domains"].items():
        assert paper_config["domains"][domain]["n_seeds"] == counts.seeds_for(counted["triplets"], generators, share)
    total = counts.expected_counts(paper_config).set_index("domain").loc["total"]
    assert (total["paper_triplets"], total["paper_pairs"], total["paper_train_pairs"]) == (8225, 45400, 12000)
    assert total["triplets"] == pytest.approx(8225, rel=0.001)
    assert total["pairs"] == pytest.approx(45400, rel=0.01)
    assert total["pairs_per_triplet"] == pytest.approx(45400 / 8225, rel=0.01)
    assert total["train_pairs"] == pytest.approx(12000, rel=0.05)


def test_cli_plan_prints_the_expected_counts_beside_the_papers(capsys):
    assert main(["plan", "--configfile", "config/config.yaml"]) == 0
    out = capsys.readouterr().out
    section = out.split("## Counts: expected beside the paper's")[1]
    total = next(line for line in section.splitlines() if line.startswith("| total"))
    cells = [cell.strip() for cell in total.strip("|").split("|")]
    assert cells[counts.COUNT_COLUMNS.index("paper_triplets")] == "8,225"
    assert cells[counts.COUNT_COLUMNS.index("paper_pairs")] == "45,400"
    assert cells[counts.COUNT_COLUMNS.index("paper_train_pairs")] == "12,000"
    assert cells[counts.COUNT_COLUMNS.index("pairs_per_triplet")] == "5.52"
    assert "## Acceptance: assumed in the config, measured by a run in `results_dir`" in out


@pytest.mark.parametrize(("configfile", "annotated_pairs"), [("config/tiny.yaml", 6), ("config/config.yaml", 900)])
def test_the_plans_bill_sends_two_requests_per_annotated_pair_at_the_registrys_prices(configfile, annotated_pairs):
    from blindspot import bill

    config = yaml.safe_load((REPO / configfile).read_text())
    frame = plan.plan(config)["bill"]
    frame = frame[frame["step"] == "score_api_metric"]  # the API VLMs' rows: tests/models/test_api_vlm.py
    assert frame["metric"].tolist() == [m for m in config["evaluation"]["metrics"] if m in ("gpt-5", "api-judge")]
    row = frame.iloc[0]
    entry = config["models"][row["model"]]
    prices = entry["prices"]
    assert (
        row["requests"]
        == 2 * annotated_pairs
        == 2 * len(config["domains"]) * config["benchmark"]["preference_pairs_per_domain"]
    )
    assert row["image_tokens"] == row["requests"] * prices.get("image_tokens", 0)
    budget = entry.get("request", {}).get("max_completion_tokens")
    assert row["output_tokens"] == row["requests"] * budget if budget else pd.isna(row["output_tokens"])
    per_request_text = row["input_tokens"] / row["requests"]
    assert per_request_text > bill.PROMPT_CHARS / bill.CHARS_PER_TOKEN  # the template's text and the prompt
    expected = (row["input_tokens"] + row["image_tokens"]) * prices["input_per_million"] / 1e6 + (
        0 if not prices["output_per_million"] else row["output_tokens"] * prices["output_per_million"] / 1e6
    )
    assert row["cost_usd"] == pytest.approx(expected)
    assert row["prices_read"] == prices["read"]
    text = render_plan_text(config, configfile)
    assert "## API models: requests, tokens and cost" in text
    assert f"| {row['metric']} " in text
    assert f"{row['requests']:,}" in text
    assert f"{row['cost_usd']:,.2f}" in text


def render_plan_text(config: dict, configfile: str) -> str:
    from blindspot.cli import render_plan

    return render_plan(plan.plan(config), configfile, "md")


def test_the_paper_configs_gpt5_bill(paper_config):
    row = plan.plan(paper_config)["bill"].iloc[0]
    # 1,800 requests at 1.25 USD per million input tokens (text and 765 per image) and at most 4,096 output
    # tokens each at 10 USD per million.
    assert (row["requests"], row["image_tokens"], row["output_tokens"]) == (1800, 1800 * 765, 1800 * 4096)
    assert row["cost_usd"] == pytest.approx((row["input_tokens"] + 1800 * 765) * 1.25e-6 + 1800 * 4096 * 10e-6)
    # Scoring the whole split asks for every kept pair's images: the plan's jobs' expected items, uncapped.
    whole = copy.deepcopy(paper_config)
    whole["evaluation"]["api_metrics_score"] = "test_split"
    jobs = plan.job_table(whole)
    expected = jobs.loc[jobs["rule"] == "score_api_metric", "items"].sum()
    assert plan.plan(whole)["bill"].iloc[0]["requests"] == pytest.approx(expected, abs=len(whole["domains"]) / 2)


def test_the_paper_plan_answers_with_every_listed_vlm_on_its_entrys_gpus_and_memory(paper_config):
    """Every VLM of `humblebench.vlms` gets an answer job per shard (every setting it answers in one job), asking
    for the GPUs of its registry entry and the memory of its weights (`job_resources.base_mb` + `weights_gb`),
    timed by its `throughput:` entry; the proprietary models answer through their APIs, on no GPU, billed."""
    humble, settings = paper_config["humblebench"], paper_config["job_resources"]
    found = plan.plan(paper_config)
    jobs = found["jobs"]
    answers = jobs[jobs["rule"] == "answer_humble"]
    proprietary = [name for name, entry in paper_config["models"].items() if entry.get("group") == "proprietary"]
    local = [vlm for vlm in humble["vlms"] if vlm not in proprietary]
    assert set(answers["model"]) == set(local)
    for vlm in local:
        entry, mine = paper_config["models"][vlm], answers[answers["model"] == vlm]
        assert len(mine) == humble["answer_shards"]
        assert set(mine["gpus"]) == {entry["gpus"]} == {1}
        images_mb = (
            resources.images_in_flight(paper_config, "answer_humble", {"vlm": vlm})
            * resources.render_pixels(paper_config)
            * settings["bytes_per_pixel"]
            / 2**20
        )
        assert set(mine["mem_mb"]) == {math.ceil(settings["base_mb"] + 1024 * entry["weights_gb"] + images_mb)}
        assert mine["gpu_hours"].notna().all()
        assert entry["group"] in ("general", "reasoning")
    assert proprietary == ["gemini-3-flash", "gemini-2.5-pro", "claude-haiku-5.5", "qwen3-vl-235b"]
    assert all(paper_config["models"][name]["backend"] == "openai_api" for name in proprietary)
    api = jobs[jobs["rule"] == "answer_api_humble"]
    assert set(api["model"]) == set(proprietary) <= set(humble["vlms"])
    assert set(api["gpus"]) == {0}
    billed = found["bill"].set_index("model")
    # as in the paper, the proprietary models answer the Original setting only (Tables 6 and 7's captions): a
    # request per question of each of its jobs (each shard's share, rounded up), one setting
    per_setting = answers.groupby("model")["items"].sum() / len(humble["settings"])  # a local VLM answers all six
    assert set(api.groupby("model")["items"].sum()) == set(per_setting)
    for name in proprietary:
        assert billed.loc[name, "requests"] == api[api["model"] == name]["items"].sum()
        assert billed.loc[name, "requests"] >= humble["release_questions"]
        assert billed.loc[name, "cost_usd"] > 0
    # what the paper's tables read, at the listed prices: under 2,000 USD for the four (8,468 in all six settings)
    assert billed.loc[proprietary, "cost_usd"].sum() < 2000
