"""profiles/slurm: it names only rules that reach SLURM, and passes the hub settings to every job."""

import re

import yaml
from conftest import REPO, local_rules

PROFILE = REPO / "profiles" / "slurm" / "config.yaml"


def workflow_rules():
    text = "".join(smk.read_text() for smk in (REPO / "workflow" / "rules").glob("*.smk"))
    rules = set(re.findall(r"^rule (\w+):", text, flags=re.M))
    rules |= set(re.findall(r"^use rule \w+ as (\w+)", text, flags=re.M))
    return rules, local_rules()


def test_the_profile_names_only_rules_that_reach_slurm():
    rules, local = workflow_rules()
    assert {"render_images", "score_api_metric"} <= rules
    assert {"make_table1", "score_api_metric"} <= local
    assert "make_humble_questions" not in local  # it decodes the whole release: a cluster job
    profile = yaml.safe_load(PROFILE.read_text())
    for section in ("set-threads", "set-resources"):
        named = set(profile.get(section, {}))
        assert named <= rules - local, f"{section}: {sorted(named - (rules - local))}"


def test_jobs_read_weights_offline_from_the_hub_cache_the_profile_passes_on():
    profile = yaml.safe_load(PROFILE.read_text())
    assert {"HF_HOME", "HF_HUB_OFFLINE"} <= set(profile["envvars"])
    # Memory and time come from the rules (blindspot.resources), never from a default.
    assert not {"mem_mb", "runtime"} & set(profile.get("default-resources") or {})
