"""profiles/slurm and what `blindspot.slurm` reads from it to submit a stage as the workflow would."""

import re

import pytest
import yaml
from conftest import REPO

from blindspot.slurm import profile_resources, profile_threads, submitit_parameters

PROFILE = REPO / "profiles" / "slurm" / "config.yaml"


def workflow_rules():
    rules = {name for smk in (REPO / "workflow" / "rules").glob("*.smk")
             for name in re.findall(r"^rule (\w+):", smk.read_text(), flags=re.M)}  # fmt: skip
    snakefile = (REPO / "workflow" / "Snakefile").read_text()
    local = set(re.findall(r"^    (\w+),$", snakefile.split("localrules:")[1].split("\n\n")[0], flags=re.M))
    return rules, local


def test_the_profile_names_only_rules_that_reach_slurm():
    rules, local = workflow_rules()
    assert "render_images" in rules
    assert "make_table1" in local
    profile = yaml.safe_load(PROFILE.read_text())
    for section in ("set-threads", "set-resources"):
        named = set(profile[section])
        assert named <= rules - local, f"{section}: {sorted(named - (rules - local))}"


def test_a_stage_asks_for_the_profiles_threads_memory_and_time_on_each_attempt():
    threads = profile_threads("render_images", PROFILE)
    first = submitit_parameters(profile_resources("render_images", 1, PROFILE), threads, 2, "render_images")
    second = submitit_parameters(profile_resources("render_images", 2, PROFILE), 8, 2, "render_images")
    assert first["cpus_per_task"] == 8
    assert (first["slurm_mem"], first["timeout_min"]) == ("96000M", 360)
    assert (second["slurm_mem"], second["timeout_min"]) == ("192000M", 720)
    assert first["slurm_additional_parameters"] == {"gpus": "2"}
    assert first["slurm_comment"] == "rule_render_images"


@pytest.mark.parametrize(("rule", "threads"), [("judge_images", 8), ("score_metric", 4), ("make_table1", 1)])
def test_each_rule_gets_the_profiles_threads_or_snakemakes_one(rule, threads):
    assert profile_threads(rule, PROFILE) == threads
