"""The workflow as users drive it: `snakemake -n` plans, config errors, the tiny preset end to end."""

import base64
import copy
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.workflow import CHROMIUM, REPO, copy_run, snakemake

from blindspot import schemas
from blindspot.humblebench.questions import problem
from blindspot.io import read_table
from blindspot.registry import MODEL_GROUPS, is_api_metric, metric_models
from blindspot.shards import n_shards
from blindspot.targets import final_targets


def planned_jobs(output: str) -> Counter:
    """Job counts per rule from the dry-run's `Job stats` table."""
    stats = output.split("Job stats:")[1].split("total")[0]
    return Counter({m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, flags=re.MULTILINE)})


def planned_outputs(output: str) -> list[str]:
    return re.findall(r"^\s+output: (.+)$", output, flags=re.MULTILINE)


def test_paper_dry_run_has_one_job_per_domain_model_and_shard(paper_config):
    # From scratch, whatever this checkout has built (the tiny preset builds NIQE too).
    out = snakemake("-n", "--forceall", "--configfile", "config/config.yaml", "--quiet", "rules")
    jobs = planned_jobs(out)
    stage = paper_config["prompt_stage"]
    shards = sum(n_shards(d["n_seeds"], paper_config["shard_size"]) for d in paper_config["domains"].values())
    domains = len(paper_config["domains"])
    assert jobs["make_seeds"] == domains
    assert jobs["generate_triplets"] == shards * len(stage["generators"])
    assert jobs["judge_triplets"] == shards * len(stage["generators"]) * len(stage["judges"])
    assert jobs["accept_triplets"] == jobs["check_prompt_quality"] == domains
    assert jobs["make_table1"] == 1
    stage = paper_config["image_stage"]
    assert jobs["render_images"] == shards * len(stage["t2i_models"])
    assert jobs["judge_images"] == shards * len(stage["t2i_models"]) * len(stage["vlms"])
    assert jobs["keep_consensus_pairs"] == domains
    assert jobs["measure_image_quality"] == shards
    assert jobs["build_model"] == 1  # only NIQE's parameters are built; every other model comes from its id
    metrics = paper_config["evaluation"]["metrics"]
    api = [name for name in metrics if is_api_metric(paper_config, name)]
    assert api == ["gpt-5"]  # its jobs run on the submit host, where the network is
    assert jobs["score_metric"] == shards * (len(metrics) - len(api))
    assert jobs["score_api_metric"] == shards * len(api)
    assert jobs["make_table3"] == 1
    # The dry run shows the counts the run should reach beside the paper's (`paper:`).
    total = next(line for line in out.splitlines() if line.startswith("| total "))
    cells = [cell.strip() for cell in total.strip("|").split("|")]
    number = {name: int(cells[i].replace(",", "")) for i, name in ((3, "triplets"), (5, "pairs"))}
    assert (cells[4], cells[6]) == ("8,225", "45,400")  # the paper's triplets and pairs
    assert number["triplets"] == pytest.approx(8225, abs=10)
    assert number["pairs"] == pytest.approx(45400, abs=100)


def planned_job_details(output: str) -> list[tuple[str, dict, dict]]:
    """(rule, wildcards, resources) of every job in a dry-run's output."""
    jobs = []
    for block in re.split(r"^(?:local)?rule ", output, flags=re.MULTILINE)[1:]:
        fields = {}
        for key in ("wildcards", "resources"):
            match = re.search(rf"^\s+{key}: (.+)$", block, flags=re.MULTILINE)
            fields[key] = dict(kv.split("=", 1) for kv in match[1].split(", ")) if match else {}
        jobs.append((block.split(":", 1)[0], fields["wildcards"], fields["resources"]))
    return jobs


MODEL_WILDCARDS = {
    "generate_triplets": "generator",
    "judge_triplets": "judge",
    "render_images": "t2i",
    "judge_images": "vlm",
    "answer_humble": "vlm",
}


def test_gpu_requests_come_from_the_registry(paper_config):
    out = snakemake("-n", "--configfile", "config/config.yaml")
    requested = {}
    for rule, wildcards, resources in planned_job_details(out):
        if rule in MODEL_WILDCARDS:
            model = wildcards[MODEL_WILDCARDS[rule]]
            requested.setdefault(model, set()).add(int(resources["gpu"]))
        elif rule == "score_metric":
            models = metric_models(paper_config["evaluation"]["metrics"][wildcards["metric"]])
            assert int(resources["gpu"]) == max(paper_config["models"][m]["gpus"] for m in models), wildcards
        elif rule == "train_protoscore":
            assert int(resources["gpu"]) == paper_config["models"][paper_config["protoscore"]["model"]]["gpus"] == 1
        elif rule in {"check_prompt_quality", "measure_image_quality"}:
            assert int(resources["gpu"]) == 1, rule  # the largest GPU need among the stage's models
        elif rule != "all":
            assert int(resources.get("gpu", 0)) == 0, rule
    assert requested == {name: {paper_config["models"][name]["gpus"]} for name in requested}
    assert requested["qwen2.5-32b-instruct"] == {2}
    assert requested["flux.1-schnell"] == {1}
    # generators and judges, T2I models, VLMs, HumbleBench's local VLMs (17 of the paper's; its API ones
    # answer in answer_api_humble, on no GPU)
    registry = paper_config["models"]
    local = [vlm for vlm in paper_config["humblebench"]["vlms"] if registry[vlm]["backend"] != "openai_api"]
    assert len(requested) == 5 + 3 + 2 + len(local) == 27


def test_a_wrong_config_key_stops_the_run_naming_it(tmp_path, paper_config):
    paper_config["prompt_stage"]["judgez"] = paper_config["prompt_stage"].pop("judges")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(paper_config))
    out = snakemake("-n", "--configfile", str(bad), check=False)
    assert "config key 'prompt_stage.judgez'" in out


def test_a_local_copy_of_the_release_is_an_input_a_hub_id_is_not(tmp_path, paper_config):
    def questions_inputs(config_path):
        out = snakemake("-n", "--configfile", str(config_path), "--until", "make_humble_questions")
        block = re.split(r"^(?:local)?rule ", out, flags=re.MULTILINE)[1:]
        found = next(b for b in block if b.startswith("make_humble_questions:"))
        listed = re.search(r"^\s+input: (.+)$", found, flags=re.MULTILINE)
        return listed[1].split(", ") if listed else []

    assert questions_inputs(REPO / "config" / "config.yaml") == []  # the release is read from the hub
    release = tmp_path / "humblebench.jsonl"
    release.write_text("")
    paper_config["humblebench"]["release"] = str(release)
    (tmp_path / "local.yaml").write_text(yaml.safe_dump(paper_config))
    assert str(release) in questions_inputs(tmp_path / "local.yaml")


def job_inputs(output: str, rule: str) -> list[list[str]]:
    """The inputs of each of `rule`'s jobs in a dry run's output."""
    blocks = [b for b in re.split(r"^(?:local)?rule ", output, flags=re.MULTILINE)[1:] if b.startswith(f"{rule}:")]
    return [re.search(r"^\s+input: (.+)$", block, flags=re.MULTILINE)[1].split(", ") for block in blocks]


@pytest.mark.parametrize("asked", ["annotated", "test_split"])
def test_an_api_metrics_jobs_depend_on_the_annotated_pairs_unless_asked_for_the_whole_split(
    tmp_path, tiny_config, asked
):
    """By default an API metric scores the annotated pairs Table 3 reads, so its jobs need the preference
    pairs; with `evaluation.api_metrics_score: test_split`, or for any other metric, they do not."""
    tiny_config["evaluation"]["api_metrics_score"] = asked
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny_config))
    shards = [f"results/tiny/objects/metric_scores/{metric}/00000.parquet" for metric in ("api-judge", "clipscore")]
    out = snakemake(*shards, "-n", "--forceall", "--configfile", str(tmp_path / "tiny.yaml"))
    preference = "results/tiny/benchmark/annotation/preference_pairs.parquet"
    (api,) = job_inputs(out, "score_api_metric")
    (other,) = job_inputs(out, "score_metric")
    assert (preference in api) == (asked == "annotated")
    assert preference not in other
    assert "results/tiny/objects/pairs.parquet" in api


def test_a_released_dataset_has_no_annotated_pairs_so_an_api_metric_scores_it_whole_and_says_so(tmp_path, tiny_config):
    (tmp_path / "pairs.csv").write_text("neutral_prompt,image_corr,image_adv\n")  # not read by a dry run
    metrics = tiny_config["evaluation"]["metrics"]
    config = tiny_config | {"dataset": {"path": str(tmp_path / "pairs.csv")}}
    config["humblebench"] |= {"from_benchmark": None}
    config["evaluation"]["metrics"] = {name: metrics[name] for name in ("clipscore", "api-judge")}
    (tmp_path / "released.yaml").write_text(yaml.safe_dump(config))
    out = snakemake("-n", "--forceall", "--configfile", str(tmp_path / "released.yaml"))
    assert "API metrics api-judge score the whole test split: a dataset has no annotated pairs" in out
    assert all("preference_pairs" not in " ".join(inputs) for inputs in job_inputs(out, "score_api_metric"))
    assert job_inputs(out, "score_api_metric")


def test_final_targets_are_the_benchmark_and_the_tables(tiny_config):
    targets = final_targets(tiny_config)
    assert "results/tiny/benchmark/dataset" in targets
    assert "results/tiny/benchmark/annotation/preference_pairs.parquet" in targets
    assert "results/tiny/tables/table1_prompt_quality.tex" in targets
    assert "results/tiny/tables/table2_image_quality.md" in targets
    assert "results/tiny/tables/table3_metrics.tex" in targets
    assert "results/tiny/tables/metric_accuracy.png" in targets
    assert "results/tiny/tables/table6_humblebench_models.tex" in targets
    assert "results/tiny/tables/humblebench_nota_tradeoff.png" in targets
    assert "results/tiny/tables/tableA1_humblebench_cautious.csv" in targets  # the appendix's Original -> Cautious
    assert not any("table7" in target for target in targets)  # no human answers in the tiny preset
    assert "results/tiny/annotation_projects" in targets
    assert not any("agreement" in target for target in targets)  # no people's labels in the tiny preset
    assert "results/tiny/tables/example_grid.png" in targets
    assert "results/tiny/tables/figure2_humblebench_distributions.png" in targets  # and its table's three formats
    assert not any("table9" in target for target in targets)  # no scene-graph questions in the tiny preset
    assert "results/tiny/tables/protobias_records.jsonl" in targets  # each benchmark's per-item records
    assert "results/tiny/tables/humblebench_records.jsonl" in targets
    assert "results/tiny/tables/tableA2_humblebench_intervals.md" in targets  # Table 4's setting with intervals
    assert "results/tiny/view" in targets  # the items' viewer
    assert len(targets) == 3 + 3 * 3 + 6 * 3 + 1 + 6 + 1 + 2 + 1


@pytest.mark.slow
def test_tiny_preset_runs_end_to_end(tiny_run, tiny_config):
    work, _ = tiny_run
    results = work / tiny_config["results_dir"]
    table = pd.read_csv(results / "tables" / "table1_prompt_quality.csv").set_index("check")
    assert list(table.columns) == ["group", "Animals", "Demography", "Objects", "Overall"]
    assert table.loc["sim(T, D_c)"][["Animals", "Demography", "Objects", "Overall"]].between(-1, 1).all()
    assert (results / "tables" / "table1_prompt_quality.md").read_text().count("|") > 20
    assert r"\begin{tabular}" in (results / "tables" / "table1_prompt_quality.tex").read_text()
    for domain in tiny_config["domains"]:
        triplets = read_table(results / domain / "triplets.parquet", schemas.TRIPLETS)
        seeds = read_table(results / domain / "seeds.parquet", schemas.SEEDS)
        assert len(seeds) == tiny_config["domains"][domain]["n_seeds"]
        assert triplets["seed_id"].isin(seeds["seed_id"]).all()
        counters = yaml.safe_load((results / domain / "triplets.counters.json").read_text())
        assert counters["accepted"] == len(triplets)
        assert counters["generated"] == len(seeds) * len(tiny_config["prompt_stage"]["generators"])
        assert table.loc["triplets", domain.capitalize()] == len(triplets)
        renders = pd.concat(
            [read_table(p, schemas.RENDERS) for p in results.glob(f"{domain}/renders/*/*.parquet")], ignore_index=True
        )
        n_t2i = len(tiny_config["image_stage"]["t2i_models"])
        assert len(renders) == 2 * len(triplets) * n_t2i * tiny_config["image_stage"]["images_per_description"]
        assert all((work / path).exists() for path in renders["path"])
        pairs = read_table(results / domain / "pairs.parquet", schemas.PAIRS)
        assert len(pairs) == len(renders) // 2
        scores = pd.concat(
            [read_table(p, schemas.VLM_SCORES) for p in results.glob(f"{domain}/vlm_scores/*/*/*.parquet")]
        )
        assert len(scores) == len(renders) * len(tiny_config["image_stage"]["vlms"])
        pair_counters = yaml.safe_load((results / domain / "pairs.counters.json").read_text())
        assert pair_counters["pairs_in"] == len(pairs)
        assert pair_counters["pairs_kept"] == int(pairs["kept"].sum())
    table2 = pd.read_csv(results / "tables" / "table2_image_quality.csv")
    assert len(table2) == len(tiny_config["image_stage"]["iqa_metrics"])
    assert table2["Pairs"].eq(sum(table.loc["triplets", d.capitalize()] for d in tiny_config["domains"]) * 3).all()
    import datasets

    kept = read_table(results / "benchmark" / "pairs.parquet", schemas.BENCHMARK_PAIRS)
    assert (kept.groupby("triplet_id")["split"].nunique() == 1).all()
    for domain in tiny_config["domains"]:
        loaded = datasets.load_dataset(str(results / "benchmark" / "dataset"), domain, cache_dir=str(work / "hf-cache"))
        assert sum(len(split) for split in loaded.values()) == (kept["domain"] == domain).sum()
        first = loaded[next(iter(loaded))][0]
        assert first["image_corr"].size == (96, 96)
        assert first["neutral_prompt"]
    preference = read_table(results / "benchmark" / "annotation" / "preference_pairs.parquet", schemas.ANNOTATION_PAIRS)
    validation = read_table(
        results / "benchmark" / "annotation" / "filter_validation.parquet", schemas.ANNOTATION_IMAGES
    )
    assert set(preference["left_image_id"]).isdisjoint(validation["image_id"])
    title = (results / "tables" / "table3_metrics.md").read_text()
    assert title.startswith("Pairwise accuracy on the whole test split")
    table3 = pd.read_csv(results / "tables" / "table3_metrics.csv")
    assert not any("κ" in column for column in table3.columns)  # κ needs people's labels
    scored = [m for m, entry in tiny_config["evaluation"]["metrics"].items() if entry["plugin"] != "api_judge"]
    labels = {tiny_config["evaluation"]["metrics"][m]["label"] for m in scored}
    assert labels <= set(table3["Method"])  # the API judge has no key here: skipped, not failed
    assert "ProtoScore" in labels  # trained on the tiny train split, scored like the others
    assert (results / "protoscore" / "trained" / "loss_curve.png").exists()
    assert "API judge" not in set(table3["Method"])
    assert table3.set_index("Method").loc[list(labels), "Overall Acc."].between(0, 1).all()
    assert (results / "tables" / "metric_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    breakdown = pd.read_csv(results / "tables" / "metric_accuracy_breakdown.csv")
    assert {"overall", "domain", "knob", "t2i", "subcategory"} <= set(breakdown["breakdown"])
    humble = tiny_config["humblebench"]
    questions = read_table(results / "humblebench" / "questions.parquet", schemas.HUMBLE_QUESTIONS)
    candidates = read_table(results / "humblebench" / "scene_graph_candidates.parquet", schemas.HUMBLE_QUESTIONS)
    assert len(candidates)  # the writer (real SmolLM2, under the JSON grammar) wrote questions about the scene graphs
    assert not (results / "humblebench" / "scene_graph_cues.journal.jsonl").exists()  # done: removed
    # SmolLM2-135M writes options that repeat: without people's verification those are left out.
    assert not any(problem(row) for row in questions.to_dict("records"))
    assert set(questions["source"]) <= {"benchmark", "scene_graph"}
    assert (questions["source"] == "benchmark").sum() == 2 * 2 * len(kept)  # subject and knob, both images
    answers = pd.concat(
        [read_table(p, schemas.HUMBLE_ANSWERS) for p in results.glob("humblebench/answers/*/*.parquet")]
    )
    assert len(answers) == len(questions) * len(humble["vlms"]) * len(humble["settings"])
    noise = answers[answers["setting"] == "noise"]
    assert noise["noise_image"].all()
    # The labels stay the questions' (as officially and in the paper's Table 5), not NOTA.
    question_labels = dict(zip(questions["question_id"], questions["label"], strict=True))
    assert (noise["label"] == noise["question_id"].map(question_labels)).all()
    table6 = pd.read_csv(results / "tables" / "table6_humblebench_models.csv")
    # The VLMs under their groups' headings, as the paper's Table 6 (the tiny preset's two groups).
    groups = [tiny_config["models"][vlm]["group"] for vlm in humble["vlms"]]
    headed = [
        row
        for group in MODEL_GROUPS
        if group in groups
        for row in [
            MODEL_GROUPS[group],
            *(vlm for vlm, own in zip(humble["vlms"], groups, strict=True) if own == group),
        ]
    ]
    assert list(table6["Model"]) == headed
    assert len(table6.columns) == 1 + len(humble["settings"])
    # Figure 2 counts every question in each panel; Table 9 is the automatic check's (no people's decisions)
    figure2 = pd.read_csv(results / "tables" / "figure2_humblebench_distributions.csv", keep_default_na=False)
    assert figure2.groupby("panel", sort=False)["questions"].sum().tolist() == [len(questions)] * 2
    table9 = pd.read_csv(results / "tables" / "table9_humblebench_filtering.csv").set_index("measure")
    assert table9.loc["Candidates", "Total"] == len(candidates)
    assert table9.loc["Final", "Total"] == (questions["source"] == "scene_graph").sum()
    assert table9.loc["Modified", "Total"] == 0
    metrics = pd.read_csv(results / "tables" / "humblebench_metrics.csv")
    assert len(metrics) == len(humble["vlms"]) * len(humble["settings"]) * 2  # both readings
    assert (results / "tables" / "humblebench_nota_tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The reasoning-template VLM (its own budget, sampled) never ends a sequence (random weights): an answer is
    # cut off unless its random text happened to hold the protocol's answer marker, which closes its reasoning
    # (about one in 500); the metrics say so per model.
    thinking = answers[answers["vlm"] == "tiny-qwen2.5-vl-thinking"]
    assert len(thinking)
    assert not thinking["stopped"].any()
    assert (thinking["cut_off"] == (thinking["reasoning"] == "")).all()
    assert thinking["cut_off"].mean() > 0.95
    cut = metrics[metrics["reading"] == metrics["reading"].iloc[0]].groupby("vlm")["cut_off"].mean()
    assert cut["tiny-qwen2.5-vl-thinking"] == pytest.approx(thinking["cut_off"].mean())
    # No temp file of an atomic write is left behind anywhere.
    assert not list(results.rglob(".*.tmp"))


@pytest.mark.slow
def test_adding_a_t2i_model_runs_only_its_jobs_and_what_depends_on_them(tiny_run, run_config):
    work, _ = tiny_run
    config = copy.deepcopy(run_config)  # the fixture is shared with the tests after this one
    config["models"]["tiny-flux-b"] = dict(config["models"]["tiny-flux"])
    config["image_stage"]["t2i_models"].append("tiny-flux-b")
    (work / "added_t2i.yaml").write_text(yaml.safe_dump(config, sort_keys=False))  # key order is part of a param
    out = snakemake("-n", "--configfile", "added_t2i.yaml", cwd=work)
    shards = sum(n_shards(d["n_seeds"], config["shard_size"]) for d in config["domains"].values())
    jobs = planned_jobs(out)
    assert jobs == Counter(
        {
            "build_model": 1,
            "render_images": shards,
            "judge_images": shards * len(config["image_stage"]["vlms"]),
            "keep_consensus_pairs": len(config["domains"]),
            "measure_image_quality": shards,
            "make_table2": 1,
            "split_benchmark": 1,
            "export_dataset": 1,
            "all": 1,
            # The benchmark gains pairs, so every metric job runs again; the score cache makes that cheap.
            "score_metric": shards * sum(not is_api_metric(config, m) for m in config["evaluation"]["metrics"]),
            "score_api_metric": shards * sum(is_api_metric(config, m) for m in config["evaluation"]["metrics"]),
            "make_table3": 1,
            "write_protobias_records": 1,
            # HumbleBench asks about the benchmark's images: new questions, answered again in every setting.
            "make_humble_questions": 1,
            "make_humble_tables": 1,
            "make_annotation_projects": 1,
            "make_report_items": 1,
            "write_humble_records": 1,
            "build_item_view": 1,
            "train_protoscore": 1,
            "sample_human_questions": 1,
            "describe_humble_questions": 1,
            "answer_humble": len(config["humblebench"]["vlms"]),  # one job a VLM asks every setting
        }
    )
    renders = [o for o in planned_outputs(out) if "/renders/" in o or "/vlm_scores/" in o]
    assert renders
    assert all("/tiny-flux-b/" in o for o in renders)


def rerun_reasons(dry_run: str) -> dict[str, set[str]]:
    """Each rule of a dry run with the reasons its jobs run for."""
    reasons: dict[str, set[str]] = {}
    for block in re.split(r"^(?:local)?rule ", dry_run, flags=re.MULTILINE)[1:]:
        found = re.search(r"^\s+reason: (.+)$", block, flags=re.MULTILINE)
        if found:
            reasons.setdefault(block.split(":", 1)[0], set()).update(found[1].split("; "))
    return reasons


def read_it(reasons: set[str]) -> bool:
    """Whether a job runs again for what it reads itself, not only because a job before it does."""
    return any(not reason.startswith("Input files updated by another job") for reason in reasons)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "value", "readers"),
    [
        # The filter's later VLM reads it (what it still scores: `filter_order: sequential`); keep_consensus_pairs,
        # split_benchmark and export_dataset read it too, but already run again after it, and Snakemake checks
        # the params only of a job whose inputs are not being remade.
        ("image_stage.consensus_threshold", 8, {"judge_images"}),
        ("image_stage.render_batch_size", 1, {"render_images"}),
        ("evaluation.bootstrap_samples", 200, {"make_table3", "make_humble_tables"}),
        ("image_stage.judge_template", "edited", {"judge_images"}),
    ],
)
def test_changing_a_value_reruns_exactly_the_jobs_that_read_it(tiny_run, run_config, key, value, readers):
    """A value a step reads is its rule's param (or input, for a file), so a dry run after changing it
    runs again the jobs that read it, and after them only what depends on their outputs."""
    work, _ = tiny_run
    config = copy.deepcopy(run_config)
    section, name = key.split(".")
    if value == "edited":  # the file's text changes, under another name
        template = work / config[section][name]
        edited = template.with_name("edited_" + template.name)
        edited.write_text(template.read_text().replace("Score how well", "Rate how well", 1))
        assert edited.read_text() != template.read_text()
        value = str(edited.relative_to(work))
    config[section][name] = value
    (work / "changed.yaml").write_text(yaml.safe_dump(config, sort_keys=False))  # key order is part of a param
    reasons = rerun_reasons(snakemake("-n", "--configfile", "changed.yaml", cwd=work))
    assert {rule for rule, why in reasons.items() if read_it(why)} == readers


@pytest.mark.slow
def test_editing_one_taxonomy_reruns_only_that_domain(tiny_run, run_config):
    work, _ = tiny_run
    assert "Nothing to be done" in snakemake("-n", cwd=work)
    taxonomy = work / "config" / "taxonomy" / "animals.yaml"
    original, stat = taxonomy.read_text(), taxonomy.stat()
    taxonomy.write_text(original.replace("pine cone", "acorn"))
    try:
        out = snakemake("-n", cwd=work)
    finally:  # the tests after this one go on from the finished run: same text, same time
        taxonomy.write_text(original)
        os.utime(taxonomy, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # ProtoScore trains on every domain's train pairs: retrained, it scores every domain again. The annotated
    # pairs are drawn over every domain: an API metric's jobs, which score those, run again too (its cached
    # replies make that free for the pairs that stay).
    metrics = run_config["evaluation"]["metrics"]
    pooled = ["/metric_scores/protoscore/"] + [f"/metric_scores/{m}/" for m in metrics if is_api_metric(run_config, m)]
    outputs = ", ".join(o for o in planned_outputs(out) if not any(part in o for part in pooled))
    assert "/animals/" in outputs
    assert "/demography/" not in outputs
    assert "/objects/" not in outputs
    jobs = planned_jobs(out)
    assert jobs["make_seeds"] == 1
    # What pools every domain runs once more: the tables, the benchmark and ProtoScore's training.
    assert jobs["make_table1"] == jobs["make_table2"] == jobs["split_benchmark"] == jobs["export_dataset"] == 1
    assert jobs["train_protoscore"] == 1


def test_another_configfile_replaces_the_tiny_default():
    out = snakemake("-n", "--configfile", "config/config.yaml", "--", "resources/models/smollm2-135m", check=False)
    assert "No rule to produce resources/models/smollm2-135m" in out


def test_a_job_runs_by_hand_with_the_arguments_the_workflow_gives_it(tiny_config, tmp_path):
    tiny_config["results_dir"] = str(tmp_path / "results")
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(tiny_config))
    command = [sys.executable, "-m", "blindspot.steps", "run", "make_seeds", "--configfile", str(configfile)]
    killed = tmp_path / "results" / "objects" / ".seeds.parquet.0123abcd.tmp"  # what a killed run left
    killed.parent.mkdir(parents=True)
    killed.write_bytes(b"half a table")
    subprocess.run([*command, "domain=objects"], cwd=REPO, check=True, capture_output=True)
    assert not killed.exists()
    seeds = read_table(tmp_path / "results" / "objects" / "seeds.parquet", schemas.SEEDS)
    assert len(seeds) == tiny_config["domains"]["objects"]["n_seeds"]
    assert set(seeds["domain"]) == {"objects"}
    unknown = subprocess.run([*command, "domain=plants"], cwd=REPO, capture_output=True, text=True)
    assert unknown.returncode == 2
    message = unknown.stderr.strip().splitlines()[-1]
    assert message.startswith("no job of make_seeds with wildcards {'domain': 'plants'}; its jobs: domain=")


def label_studio_export(items: list[str], result, people=("ann1", "ann2")) -> list[dict]:
    """People's labels in Label Studio's export format: `result(annotator, item)` gives one result."""
    return [
        {
            "id": i + 1,
            "data": {"item_id": item},
            "annotations": [{"completed_by": {"email": who}, "result": [result(who, item)]} for who in people],
        }
        for i, item in enumerate(items)
    ]


@pytest.fixture(scope="module")
def labelled_run(tiny_run, run_config) -> str:
    """After the run, people's labels come in (`labelled.yaml`: the run's config with the evaluator's image
    scores and two annotators' pairwise choices, `PREFERS_CORR`), and the workflow runs again with them.
    Once per module, for every test that goes on from the labelled run; its dry run's output (the plan
    before the labels were used)."""
    work, _ = tiny_run
    annotation = work / run_config["results_dir"] / "benchmark" / "annotation"
    images = read_table(annotation / "filter_validation.parquet", schemas.ANNOTATION_IMAGES)
    pairs = read_table(annotation / "preference_pairs.parquet", schemas.ANNOTATION_PAIRS)
    # The filter validation is scored by its one designated evaluator (annotation.filter_evaluators).
    evaluators = tuple(run_config["annotation"]["filter_evaluators"])
    scores = label_studio_export(
        list(images["image_id"]),
        lambda who, item: {"from_name": "score", "type": "rating", "value": {"rating": 9}},
        evaluators,
    )
    order = sorted(pairs["pair_id"])
    position = {pair: i for i, pair in enumerate(order)}
    corr_on_left = dict(zip(pairs["pair_id"], pairs["left_role"] == "corr", strict=True))

    def choice(who: str, pair: str) -> dict:
        prefers_corr = PREFERS_CORR[who](position[pair], len(order))
        side = "left" if prefers_corr == corr_on_left[pair] else "right"
        return {"from_name": "choice", "type": "choices", "value": {"choices": [side]}}

    choices = label_studio_export(order, choice)
    (work / "scores.json").write_text(json.dumps(scores))
    (work / "choices.json").write_text(json.dumps(choices))
    config = run_config | {
        "annotation": run_config["annotation"]
        | {"image_score_labels": "scores.json", "pairwise_labels": "choices.json"}
    }
    (work / "labelled.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    out = snakemake("-n", "--configfile", "labelled.yaml", cwd=work)
    snakemake("--configfile", "labelled.yaml", "--profile", "profiles/local", "-c2", cwd=work)
    return out


# Whether each annotator prefers I_corr on the i-th of n pairs (by pair id): ann1 on all but the last, ann2
# only on the first. Both vary, so their kappa is neither 0 nor 1 (`two_annotators_kappa`).
PREFERS_CORR = {"ann1": lambda i, n: i < n - 1, "ann2": lambda i, n: i == 0}


def two_annotators_kappa(n: int) -> float:
    """The quadratic weighted kappa of `PREFERS_CORR`'s annotators on n pairs. On the scale adv < neither <
    corr they disagree on the n - 2 middle pairs, each corr against adv (distance 2, weight 4): observed
    disagreement 4 (n - 2) / n. ann1 says corr with share (n - 1) / n and ann2 with 1 / n, so chance
    disagreement is 4 ((n - 1)^2 + 1) / n^2. Kappa is 1 - observed / chance (0.4 for 3 pairs)."""
    return 1 - n * (n - 2) / ((n - 1) ** 2 + 1)


@pytest.mark.slow
def test_peoples_labels_add_the_agreement_tables_and_the_human_row(tiny_run, run_config, labelled_run):
    """After the run, people's labels come in: only the human-study rules and Table 3 run again."""
    work, _ = tiny_run
    results = work / run_config["results_dir"]
    annotation = results / "benchmark" / "annotation"
    images = read_table(annotation / "filter_validation.parquet", schemas.ANNOTATION_IMAGES)
    pairs = read_table(annotation / "preference_pairs.parquet", schemas.ANNOTATION_PAIRS)
    assert len(images)
    assert len(pairs)
    projects = results / "annotation_projects"
    assert {p.name for p in projects.iterdir() if not p.name.startswith(".")} == {
        "image_score",
        "pairwise",
        "question_check",
        "humble_answer",
    }
    assert planned_jobs(labelled_run) == Counter(
        {"validate_filter": 1, "human_preferences": 1, "make_table3": 1, "all": 1}
    )
    assert (
        (results / "tables" / "table3_metrics.md")
        .read_text()
        .startswith(f"Table 3: main results on the {len(pairs)} human-annotated test pairs")
    )
    whole_split = pd.read_csv(results / "tables" / "table3_test_split.csv")
    assert "Human" not in set(whole_split["Method"])
    assert not any("κ" in column for column in whole_split.columns)
    table3 = pd.read_csv(results / "tables" / "table3_metrics.csv").set_index("Method")
    # only on the first pair do both prefer I_corr; the middle ones are ties ("neither"), the last adv
    assert len(pairs) >= 3
    assert table3.loc["Human", "Overall Acc."] == pytest.approx(1 / len(pairs))
    # the annotators' agreement, filled in
    kappa = two_annotators_kappa(len(pairs))
    assert table3.loc["Human", "Overall κ"] == pytest.approx(kappa)
    agreement = pd.read_csv(results / "tables" / "annotator_agreement.csv")
    assert list(agreement["Annotator"]) == ["ann1", "ann2", "mean (pairs)"]
    assert agreement.loc[0, "ann2"] == agreement.loc[1, "ann1"] == pytest.approx(kappa)
    validation = pd.read_csv(results / "tables" / "filter_validation_agreement.csv").set_index("domain")
    assert validation.loc["overall", "images"] == len(images)
    # the evaluator keeps every image (9 >= 8), so they disagree with the filter on each image it rejected
    assert validation.loc["overall", "binary_disagreement"] == pytest.approx(1 - images["accepted"].mean())
    assert "decision_kappa" in validation.columns


REPORTED = {
    "Prompt quality": ["tables/table1_prompt_quality.csv"],
    "Image quality": ["tables/table2_image_quality.csv"],
    "Metrics": ["tables/table3_metrics.csv", "tables/table3_test_split.csv", "tables/metric_accuracy.png"],
    "HumbleBench": [
        "tables/table4_humblebench_original.csv",
        "tables/table5_humblebench_settings.csv",
        "tables/table6_humblebench_models.csv",
        "tables/humblebench_nota_tradeoff.png",
        "tables/figure2_humblebench_distributions.csv",
        "tables/figure2_humblebench_distributions.png",
        "tables/table9_humblebench_filtering.csv",
    ],
    "Benchmark": ["tables/example_grid.png", "tables/stage_counters.csv", "benchmark/dataset_card.md"],
    "Human studies": ["tables/filter_validation_agreement.csv", "tables/annotator_agreement.csv"],
}


@pytest.mark.slow
@pytest.mark.browser
def test_the_report_holds_every_table_and_image(tiny_run, run_config, labelled_run):
    """`snakemake --report` (after people's labels came in) is one self-contained HTML file: every table,
    plot, the example grid, the counters and the dataset card are inside it, byte for byte, and Chromium
    shows them under their categories."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    work, _ = tiny_run
    snakemake("--configfile", "labelled.yaml", "--report", "report.html", cwd=work)
    html = (work / "report.html").read_text()
    results = work / run_config["results_dir"]
    for files in REPORTED.values():
        for name in files:
            found = re.search(rf"filename={re.escape(Path(name).name)};base64,([A-Za-z0-9+/=]+)", html)
            assert found, name
            assert base64.b64decode(found[1]) == (results / name).read_bytes(), name
    counters = pd.read_csv(results / "tables" / "stage_counters.csv")
    assert set(counters["stage"]) == {
        "raw",
        "judged",
        "triplets",
        "renders",
        "vlm_scores",
        "pairs",
        "metric_scores",
        "split",
        "scene_graph_candidates",
        "questions",
        "answers",
    }
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto((work / "report.html").as_uri())
        # The report is one page: "Results" (the sidebar's way up) leads back to the categories.
        for category, files in REPORTED.items():
            page.get_by_text("Results", exact=True).click()
            page.get_by_text(category, exact=True).first.click()
            for name in files:
                page.locator("tr", has_text=f"{run_config['results_dir']}/{name}").wait_for()
        page.get_by_text("Results", exact=True).click()
        page.get_by_text("Benchmark", exact=True).first.click()
        page.locator("tr", has_text="example_grid.png").locator("a[iconname=eye]").click()
        shown = page.locator("img[src^='data:image/png']")
        shown.wait_for()
        with Image.open(results / "tables" / "example_grid.png") as grid:
            assert shown.evaluate("img => img.naturalWidth") == grid.width
        # its description links to the items' viewer, which opens from disk with every test pair and answer
        page.goto((work / "report.html").as_uri())
        link = page.locator("a[href$='view/index.html']").first.get_attribute("href")
        assert link == f"{run_config['results_dir']}/view/index.html"
        page.goto((work / link).as_uri())
        records = (results / "tables" / "protobias_records.jsonl").read_text().splitlines()
        pairs = {json.loads(line)["pair_id"] for line in records}
        assert page.inner_text("#count") == f"{len(pairs)} pairs"
        assert page.eval_on_selector_all(".item img", "imgs => imgs.every(i => i.complete && i.naturalWidth)")
        browser.close()


@pytest.mark.slow
def test_verified_scene_graph_questions_are_answered_in_every_setting(tiny_run, run_config, labelled_run):
    """People fix the writer's candidates in the verification sheet (modify); the fixed questions join
    HumbleBench and every VLM answers them in every setting."""
    work, _ = tiny_run
    results = work / run_config["results_dir"]
    sheet = pd.read_csv(results / "humblebench" / "scene_graph_verification.csv", dtype=str, keep_default_na=False)
    fixed = dict(zip("ABCDE", ["car", "tree", "table", "cup", "None of the above"], strict=True))
    sheet = sheet.assign(
        decision="modify", question="Which object is in the picture?", label="A", type="Object", **fixed
    )
    sheet.to_csv(work / "verified.csv", index=False)
    labelled = yaml.safe_load((work / "labelled.yaml").read_text())
    labelled["humblebench"]["scene_graphs"]["verification"] = "verified.csv"
    (work / "verified.yaml").write_text(yaml.safe_dump(labelled, sort_keys=False))
    humble = run_config["humblebench"]
    jobs = planned_jobs(snakemake("-n", "--configfile", "verified.yaml", cwd=work))
    assert jobs == Counter(
        {
            "make_humble_questions": 1,
            "answer_humble": len(humble["vlms"]),  # one job a VLM asks every setting
            "make_humble_tables": 1,
            "describe_humble_questions": 1,
            "make_report_items": 1,
            "write_humble_records": 1,
            "build_item_view": 1,
            "all": 1,
            # the questions change: the human study is drawn again, and its project made
            "sample_human_questions": 1,
            "make_annotation_projects": 1,
        }
    )
    snakemake("--configfile", "verified.yaml", "--profile", "profiles/local", "-c2", cwd=work)
    questions = read_table(results / "humblebench" / "questions.parquet", schemas.HUMBLE_QUESTIONS)
    scene = questions[questions["source"] == "scene_graph"]
    assert len(scene) == len(sheet)
    assert scene["verified"].all()
    answers = pd.concat(
        [read_table(p, schemas.HUMBLE_ANSWERS) for p in results.glob("humblebench/answers/*/*.parquet")]
    )
    answered = answers[answers["question_id"].isin(scene["question_id"])]
    assert len(answered) == len(scene) * len(humble["vlms"]) * len(humble["settings"])
    table9 = pd.read_csv(results / "tables" / "table9_humblebench_filtering.csv").set_index("measure")
    assert table9.loc["Candidates", "Total"] == table9.loc["Final", "Total"] == len(sheet)
    assert table9.loc["Modified", "Total"] == 100  # every candidate fixed by people


@pytest.mark.slow
def test_two_annotators_answer_on_the_page_and_table7_sets_them_beside_the_models(tiny_run, run_config, tmp_path):
    """Table 7's human study end to end: the run drew each annotator's questions and made the
    humble_answer project; two people answer theirs on the built-in page (HTTP, as a browser posts the
    form), its export is named as `humblebench.human_answers`, and only the tables run again: Table 7 has
    the paper's rows and columns, people's Overall the mean of each one's accuracy on their set. In a
    copy of the run, first brought back to the tiny preset (the tests before it leave their configs'
    outputs there)."""
    import threading
    import urllib.request
    from urllib.parse import urlencode

    from blindspot.annotation.label_studio import export_labels
    from blindspot.annotation.projects import load_project
    from blindspot.annotation.server import serve
    from blindspot.humblebench.settings import is_nota

    work = copy_run(tiny_run[0], tmp_path / "run")
    snakemake("--profile", "profiles/local", "-c2", cwd=work)
    results = work / run_config["results_dir"]
    study = read_table(results / "humblebench" / "human_study.parquet", schemas.HUMAN_STUDY)
    people = run_config["humblebench"]["human_study"]["annotators"]
    assert sorted(set(study["annotator"])) == sorted(people)
    assert len(people) == 2
    folder = work / "annotation" / "humble_answer"  # served from a copy, outside the workflow's outputs
    shutil.copytree(results / "annotation_projects" / "humble_answer", folder)
    server = serve(folder, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        for who, link in ((name, f"{base}/a/{token}") for name, token in load_project(folder)["annotators"].items()):
            for item in study[study["annotator"] == who].itertuples():
                letter = item.letters[0] if who == people[0] else item.letters[-1]  # the first shown, or NOTA
                form = urlencode({"item_id": item.item_id, "answer": letter}).encode()
                with urllib.request.urlopen(urllib.request.Request(f"{link}/label", data=form)) as response:
                    assert response.status == 200  # the redirect to the next item, followed
            with urllib.request.urlopen(link) as response:
                assert "All items are labelled" in response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert export_labels(folder, work / "answers.json", {name: f"{name}@lab.org" for name in people}) == len(study)
    config = run_config | {"humblebench": run_config["humblebench"] | {"human_answers": "answers.json"}}
    (work / "humans.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    jobs = planned_jobs(snakemake("-n", "--configfile", "humans.yaml", cwd=work))
    assert jobs["make_humble_tables"] == 1
    assert not {"sample_human_questions", "answer_humble", "make_annotation_projects"} & set(jobs)
    snakemake("--configfile", "humans.yaml", "--profile", "profiles/local", "-c2", cwd=work)
    table = pd.read_csv(results / "tables" / "table7_humblebench_humans.csv")
    assert list(table.columns) == ["Model", "Overall", "Non-NOTA", "NOTA hit", "False-NOTA", "HS", "NOTA hit (stress)"]
    assert list(table["Model"]) == ["Human (mean of 2)", *run_config["humblebench"]["vlms"]]
    questions = read_table(results / "humblebench" / "questions.parquet", schemas.HUMBLE_QUESTIONS)
    label = dict(zip(questions["question_id"], questions["label"], strict=True))
    original = study[study["setting"] == run_config["humblebench"]["tables"]["original"]]
    right = [
        (own["letters"].str[0 if who == people[0] else -1] == own["question_id"].map(label)).mean()
        for who, own in original.groupby("annotator")
    ]
    assert table.loc[0, "Overall"] == pytest.approx(100 * sum(right) / 2, abs=0.01)
    # on the stress questions NOTA is right: a hit where the letter chosen is NOTA's as shown
    stress = study[study["setting"] == run_config["humblebench"]["tables"]["stress"]]
    nota = stress.apply(lambda r: r["letters"][[is_nota(o) for o in json.loads(r["options"])].index(True)], axis=1)
    chosen = stress["letters"].str[0].where(stress["annotator"] == people[0], stress["letters"].str[-1])
    hits = (chosen == nota).groupby(stress["annotator"]).mean()
    assert table.loc[0, "NOTA hit (stress)"] == pytest.approx(100 * hits.mean(), abs=0.01)


# Last in the file: it scores the API judge for real in the shared run, which the tests above plan from.
def test_the_api_judge_scores_only_the_annotated_pairs_against_a_local_endpoint(tiny_run, run_config, monkeypatch):
    """The tiny preset's API judge, its key set and its endpoint a local OpenAI-compatible server on
    127.0.0.1 (bench/peers/api_rate.py's, answering a score): it is asked about both images of each
    annotated pair and nothing else, no more than `blindspot plan`'s bill planned."""
    sys.path.insert(0, str(REPO / "bench"))
    from peers.api_rate import RateLimitedServer

    from blindspot import bill, plan, targets

    work, _ = tiny_run
    config = copy.deepcopy(run_config)
    metric = next(name for name in config["evaluation"]["metrics"] if is_api_metric(config, name))
    model = config["evaluation"]["metrics"][metric]["model"]
    monkeypatch.setenv(config["models"][model]["api_key_env"], "sk-local")
    with RateLimitedServer(rate=200, in_flight=8, delay_s=0.01) as server:
        config["models"][model]["endpoint"] = server.endpoint
        (work / "api_judge.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        outputs = [
            out
            for domain in config["domains"]
            for out in targets.shard_targets(config, "metric_scores", domain, metric=[metric])
        ]
        snakemake("--profile", "profiles/local", "-c2", "--configfile", "api_judge.yaml", "--", *outputs, cwd=work)
    annotated = read_table(work / targets.path(config, "preference_pairs"), schemas.ANNOTATION_PAIRS)
    scores = pd.concat([read_table(work / out, schemas.METRIC_SCORES) for out in outputs])
    assert sorted(scores["pair_id"]) == sorted(annotated["pair_id"])
    assert scores[["corr_raw", "adv_raw"]].notna().all().all()
    assert server.answered == 2 * len(annotated)
    monkeypatch.chdir(work)
    planned = bill.planned_requests(config, plan.job_table(config), metric)
    assert server.answered <= planned


@pytest.mark.slow
@pytest.mark.integration
def test_an_api_vlm_answers_humblebench_beside_the_local_ones_and_is_never_asked_twice(
    tiny_run, run_config, tmp_path, monkeypatch
):
    """An API VLM (backend openai_api) joins humblebench.vlms, its endpoint `transformers serve` on 127.0.0.1
    serving the run's tiny Qwen2.5-VL: its answer jobs answer every question in every setting, no more
    requests than `blindspot plan`'s bill, its rows join Tables 4 to 6 beside the local VLMs', and
    its jobs run again ask the server nothing (every reply cached). In a copy of the run (its models hard
    links): the tables there change, which the other tests plan from."""
    from helpers.api_server import KEY, KEY_ENV, _letter_bias, served_posts, serving

    from blindspot import plan, targets
    from blindspot.models.spec import model_spec

    work = copy_run(tiny_run[0], tmp_path / "run")
    config = copy.deepcopy(run_config)
    served = model_spec(config | {"resources_dir": str(work / config["resources_dir"])}, "tiny-qwen2.5-vl").path
    monkeypatch.setenv(KEY_ENV, KEY)
    with serving(served, tmp_path) as server:
        config["models"]["api-vlm"] = {
            "id": served,
            "backend": "openai_api",
            "endpoint": f"http://127.0.0.1:{server['port']}/v1",
            "api_key_env": KEY_ENV,
            "gpus": 0,
            "prices": {"input_per_million": 0, "output_per_million": 0, "read": "2026-01-01", "source": "local"},
            # One token, pushed towards the letters: the random-weight model then names an option (noise, but real).
            "request": {"max_tokens": 1, "temperature": 0, "logit_bias": _letter_bias(served)},
            "client": {"concurrency": 2, "max_concurrency": 4, "timeout_s": 120},
            "group": "proprietary",
            # its own list wins over its group's (the proprietary group answers the Original setting only)
            "humble_settings": list(config["humblebench"]["settings"]),
        }
        humble = config["humblebench"]
        humble["vlms"] = [*humble["vlms"], "api-vlm"]
        (work / "api_vlm.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        answers = [out for out in targets.humble_answer_targets(config) if "/api-vlm/" in out]
        outputs = [*answers, *targets.humble_table_targets(config)]
        run = ("--profile", "profiles/local", "-c2", "--configfile", "api_vlm.yaml", "--", *outputs)
        snakemake(*run, cwd=work)
        asked = served_posts(server["log"])
        first = pd.concat([read_table(work / out, schemas.HUMBLE_ANSWERS) for out in answers], ignore_index=True)
        # Its jobs run again: every reply is read from the cache, the server is asked nothing.
        snakemake("--forcerun", "answer_api_humble", *run, cwd=work)
        assert served_posts(server["log"]) == asked
    again = pd.concat([read_table(work / out, schemas.HUMBLE_ANSWERS) for out in answers], ignore_index=True)
    pd.testing.assert_frame_equal(again, first)
    questions = read_table(work / targets.path(config, "humble_questions"), schemas.HUMBLE_QUESTIONS)
    assert len(first) == len(questions) * len(humble["settings"])
    # One request per distinct request, each reply cached once: the Noise settings' questions share one image,
    # so a question asked twice there is read from the cache.
    cached = list((work / targets.path(config, "humble_api_cache", vlm="api-vlm")).rglob("*.json"))
    assert 0 < len(cached) == asked <= len(first)
    assert (first["model_id"] == served).all()
    assert first["text"].isin(list("ABCDE")).all()  # each reply names a letter
    # read by the local models' parser: a letter the question does not show (it has fewer options) is unparseable
    assert first["prediction_text"].isin(["", *"ABCDE"]).all()
    assert first["prediction_text"].ne("").any()
    assert (first["prediction_logits"] == first["prediction_text"]).all()  # no logprobs: the text's letter
    monkeypatch.chdir(work)
    bill = plan.plan(config)["bill"].set_index("model")
    assert asked <= bill.loc["api-vlm", "requests"]

    def table(kind: str) -> pd.DataFrame:
        return pd.read_csv(work / targets.path(config, kind, ext="csv"))

    metrics = pd.read_csv(work / targets.path(config, "humble_metrics"))
    assert len(metrics[metrics["vlm"] == "api-vlm"]) == len(humble["settings"]) * 2  # both readings
    # the models under the paper's group headings (general, reasoning, proprietary: the list's order here)
    headings = set(MODEL_GROUPS.values())
    assert [m for m in table("table4")["Model"] if m not in headings] == humble["vlms"]
    table6 = table("table6").set_index("Model")
    assert [m for m in table6.index if m not in headings] == humble["vlms"]
    assert list(table6.index).index("Proprietary models") == list(table6.index).index("api-vlm") - 1
    assert table6.loc["api-vlm"].notna().all()
    assert (table("table5")["# Models"] == len(humble["vlms"])).all()  # each setting averaged over all of them
    for path in [*work.joinpath(config["results_dir"]).rglob("*"), server["log"]]:
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path
