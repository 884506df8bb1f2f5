"""Every step takes exactly what its rule names, and reads all of it: what triggers a re-run is what the
code reads. A step never sees the config."""

import ast
import functools
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.workflow import REPO, SNAKEMAKE

from blindspot.catalogue import STEPS
from blindspot.steps import step_function

# A built model's directory is in its spec (a param); the input only orders the build before the job
# and re-runs the job when the model is rebuilt.
ORDER_ONLY_INPUTS = {"built_model", "built_models"}


@functools.cache
def workflow_rules() -> dict[str, dict[str, set[str]]]:
    """Each rule of the workflow (the tiny preset's) with the names of its inputs, outputs, params and wildcards."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, Quietness, ResourceSettings

    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        workflow = api.workflow(ResourceSettings(), snakefile=REPO / "workflow" / "Snakefile", workdir=REPO)._workflow
        return {
            rule.name: {
                "named": set(rule.input.keys()) | set(rule.output.keys()) | set(rule.params.keys()),
                "wildcards": set(rule.wildcard_names),
            }
            for rule in workflow.rules
            if rule.name != "all"
        }


def names_read(function) -> set[str]:
    """The names a function's body reads."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    body = tree.body[0].body
    return {node.id for stmt in body for node in ast.walk(stmt) if isinstance(node, ast.Name)}


def test_the_catalogue_lists_every_rule_of_the_workflow():
    assert set(workflow_rules()) == set(STEPS)


@pytest.mark.parametrize("rule", list(STEPS))
def test_a_step_takes_exactly_what_its_rule_names_and_reads_it(rule):
    step = step_function(rule)
    takes = set(inspect.signature(step).parameters)
    named, wildcards = workflow_rules()[rule]["named"], workflow_rules()[rule]["wildcards"]
    assert "config" not in takes, f"{rule}: a step takes its values, not the config"
    # An argument with a default is one that only some of the rules running the step name (an API
    # metric's planned requests): one of them must.
    optional = {name for name, p in inspect.signature(step).parameters.items() if p.default is not p.empty}
    sharing = [other for other in workflow_rules() if step_function(other) is step]
    assert all(any(name in workflow_rules()[other]["named"] for other in sharing) for name in optional)
    assert takes - optional <= named | wildcards, (
        f"{rule}: the step takes {sorted(takes - optional - named - wildcards)}, which the rule does not name"
    )
    assert named - ORDER_ONLY_INPUTS <= takes, (
        f"{rule}: the rule names {sorted(named - ORDER_ONLY_INPUTS - takes)}, which the step does not take"
    )
    assert takes <= names_read(step), f"{rule}: the step never reads {sorted(takes - names_read(step))}"


def test_a_step_gets_its_arguments_from_the_job_by_name():
    from types import SimpleNamespace

    from blindspot.steps import step_arguments

    class Named(SimpleNamespace):
        def keys(self):
            return vars(self).keys()

    def make_things(taxonomy, n_seeds, domain, out):
        """A step of four arguments."""

    job = SimpleNamespace(
        rule="make_things",
        output=Named(out="o.parquet"),
        input=Named(taxonomy="t.yaml"),
        params=Named(n_seeds=3, seed=1),
        wildcards=Named(domain="animals"),
    )
    assert step_arguments(make_things, job) == {
        "taxonomy": "t.yaml",
        "domain": "animals",
        "n_seeds": 3,
        "out": "o.parquet",
    }
    job.params = Named(seed=1)
    with pytest.raises(TypeError, match="needs 'n_seeds'"):
        step_arguments(make_things, job)


TOY_RULE = """

rule count_seeds:
    input:
        seeds=P("seeds"),
    output:
        out=f"{config['results_dir']}/{{domain}}/seed_count.txt",
    log:
        LOG("count_seeds"),
    threads: get_threads("count_seeds")
    resources:
        **get_resources("count_seeds"),
    conda:
        get_env("count_seeds")
    script:
        "../scripts/run_stage.py"
"""
TOY_STEP = '''

def count_seeds(seeds: str, out: str) -> None:
    """How many seeds a domain has: a toy step."""
    from blindspot import io, schemas

    io.write_text(out, f"{len(io.read_table(seeds, schemas.SEEDS))}\\n")
'''


# How Snakemake reads the toy rule: local or not, and its env.
PARSED_RULE = """
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ResourceSettings
with SnakemakeApi() as api:
    workflow = api.workflow(ResourceSettings(), snakefile="workflow/Snakefile")._workflow
    rule = workflow.get_rule("count_seeds")
    print(workflow.is_local(rule), rule.conda_env({"domain": "animals"}))  # get_env(rule): a function
"""


@pytest.mark.slow  # runs Snakemake for real (a copy of the checkout, a toy step)
@pytest.mark.integration
def test_a_new_step_is_a_rule_a_catalogue_entry_and_a_function(tmp_path, tiny_config):
    """A toy step added as the docs say runs as a local job of the workflow, its log where the catalogue puts it."""
    for part in ("workflow", "src", "config"):
        shutil.copytree(REPO / part, tmp_path / part, symlinks=True)
    (tmp_path / "resources").mkdir()
    (tmp_path / "resources" / "downloads").symlink_to(REPO / "resources" / "downloads")
    catalogue = tmp_path / "src" / "blindspot" / "catalogue.py"
    entry = '    Step("count_seeds", "prompts", wildcards=("domain",), local=True),\n]\n# fmt: on'
    catalogue.write_text(catalogue.read_text().replace("]\n# fmt: on", entry, 1))
    module = tmp_path / "src" / "blindspot" / "steps" / "prompts.py"
    module.write_text(module.read_text() + TOY_STEP)
    rules = tmp_path / "workflow" / "rules" / "prompts.smk"
    rules.write_text(rules.read_text() + TOY_RULE)
    # The copy's package, not the installed checkout's, in the workflow and its jobs.
    environment = os.environ | {"PYTHONPATH": str(tmp_path / "src")}
    target = f"{tiny_config['results_dir']}/animals/seed_count.txt"
    subprocess.run([*SNAKEMAKE, "-c1", target], cwd=tmp_path, env=environment, check=True, capture_output=True)
    assert (tmp_path / target).read_text() == f"{tiny_config['domains']['animals']['n_seeds']}\n"
    assert (tmp_path / tiny_config["results_dir"] / "logs" / "count_seeds" / "animals.log").exists()
    # The catalogue makes it a local job (the submit host's) in the base env.
    parsed = subprocess.run(
        [sys.executable, "-c", PARSED_RULE], cwd=tmp_path, env=environment, check=True, capture_output=True, text=True
    )
    assert parsed.stdout.split() == ["True", "../envs/base.yaml"]


def test_a_step_argument_may_have_any_name(monkeypatch):
    """export_dataset takes `name` (the benchmark's): running it must not collide with the runner's own."""
    from blindspot import steps

    received = {}
    monkeypatch.setattr(steps, "step_function", lambda step: lambda **arguments: received.update(arguments))
    steps.run_step("export_dataset", name="protobias", step="x")
    assert received == {"name": "protobias", "step": "x"}


def test_a_job_stopped_by_bad_input_ends_its_log_with_the_one_line_after_the_traceback(tmp_path):
    log = tmp_path / "logs" / "make_seeds.log"
    code = textwrap.dedent(f"""
        from blindspot import steps
        def make_seeds():
            raise ValueError("taxonomy x.yaml key 'domain': 'birds' but config names it 'animals'")
        steps.step_function = lambda name: make_seeds
        steps.setup_logging({str(log)!r})
        steps.run_step("make_seeds")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr == ""  # all of it is in the job's log
    lines = log.read_text().splitlines()
    assert "Traceback (most recent call last):" in lines  # for whoever debugs it
    assert lines[-1] == "taxonomy x.yaml key 'domain': 'birds' but config names it 'animals'"


def test_a_job_copies_remote_code_into_its_own_modules_cache_not_the_shared_one(tmp_path):
    """transformers copies a model's remote code into HF_MODULES_CACHE before importing it; jobs sharing
    HF_HOME's would race on that copy, so each job gets its own, removed when it ends."""
    model = tmp_path / "remote-model"
    model.mkdir()
    (model / "configuration_demo.py").write_text(
        "from transformers import PretrainedConfig\n\n\nclass DemoConfig(PretrainedConfig):\n    model_type = 'demo'\n"
    )
    config = {"model_type": "demo", "auto_map": {"AutoConfig": "configuration_demo.DemoConfig"}}
    (model / "config.json").write_text(json.dumps(config))
    code = textwrap.dedent(f"""
        import json, os
        from blindspot import steps

        def load_remote_config():
            from transformers import AutoConfig

            loaded = AutoConfig.from_pretrained({str(model)!r}, trust_remote_code=True)
            folder = os.environ["HF_MODULES_CACHE"]
            copies = [os.path.relpath(os.path.join(root, name), folder)
                      for root, _, names in os.walk(folder) for name in names if name == "configuration_demo.py"]
            print(json.dumps({{"class": type(loaded).__name__, "folder": folder, "copies": copies}}))

        steps.step_function = lambda name: load_remote_config
        steps.run_step("judge_images")
        print(json.dumps({{"after": os.environ.get("HF_MODULES_CACHE")}}))
    """)
    hf_home = tmp_path / "hf"
    env = os.environ | {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_MODULES_CACHE", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    during, after = map(json.loads, done.stdout.splitlines()[-2:])
    assert during["class"] == "DemoConfig"
    assert len(during["copies"]) == 1  # the job's own copy
    assert not (hf_home / "modules").exists()  # the shared cache is untouched
    assert not Path(during["folder"]).exists()  # removed with the job
    assert after == {"after": None}


@pytest.mark.parametrize(
    ("content", "says"),
    [(None, r"missing\.job\.json: no such job file"), ("{}", r"is not a job file"), ("[1", r"is not a job file")],
)
def test_replaying_a_missing_or_broken_job_file_is_one_line(tmp_path, content, says):
    path = tmp_path / "missing.job.json"
    if content is not None:
        path.write_text(content)
    done = subprocess.run(
        [sys.executable, "-m", "blindspot.steps", "replay", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert re.search(says, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1
