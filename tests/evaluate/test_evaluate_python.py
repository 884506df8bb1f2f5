"""`blindspot evaluate` from Python, as a notebook uses it: a fresh process that imports `blindspot`, scores a
sample with a plug-in that loads no model, reads the per-item records back, and gets one-line errors (a bad
limit, a truncated image)."""

import json
import os
import subprocess
import sys

import pytest
from helpers.evaluate import _cut as cut
from helpers.evaluate import pairs_csv
from helpers.plugins import PLUGIN

NOTEBOOK = """
import json, sys
import blindspot.api
from blindspot.config import ConfigError

dataset, broken = sys.argv[1:]
rows = blindspot.api.evaluate("protobias", dataset=dataset, metrics=["{plugin}"], limit=3, results_dir="sampled")
records = blindspot.api.read_records(rows.attrs["records"])
refused = []
for arguments in ({{"dataset": dataset, "limit": 0}}, {{"dataset": broken}}):
    try:
        blindspot.api.evaluate("protobias", metrics=["{plugin}"], **arguments)
    except ConfigError as error:
        refused.append(str(error))
print(json.dumps({{"sample": dict(zip(rows["Method"], rows["sample"])),
                  "pairs": records["pair_id"].tolist(), "correct": records["correct"].tolist(), "refused": refused}}))
"""


@pytest.mark.slow
@pytest.mark.integration
def test_a_notebook_scores_a_sample_with_a_model_free_plug_in_and_reads_its_records(
    local_plugin,
    colour_exported,
    tmp_path,
):
    benchmark, dataset = colour_exported
    test = benchmark[benchmark["split"] == "test"].set_index("pair_id")
    (tmp_path / "broken").mkdir()
    broken = pairs_csv(tmp_path / "broken")
    cut(tmp_path / "broken" / "b1.png")
    path = os.pathsep.join([str(local_plugin), os.environ.get("PYTHONPATH", "")])
    ran = subprocess.run(
        [sys.executable, "-c", NOTEBOOK.format(plugin=PLUGIN), str(dataset), str(broken)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": path},
        timeout=1200,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    found = json.loads(ran.stdout.splitlines()[-1])
    assert found["sample"][PLUGIN] == f"3 of {len(test)} pairs"  # (the family's title row has one too)
    assert len(found["pairs"]) == 3
    assert set(found["pairs"]) <= set(test.index)
    # each pair's decision is the one its images were made to give; the failures come first
    assert found["correct"] == [bool(test.loc[pair, "right"]) for pair in found["pairs"]]
    assert found["correct"] == sorted(found["correct"])
    assert found["refused"] == [
        "limit 0: not a whole number of items, at least 1",
        f"dataset {broken}, row 2 (image_adv): {broken.parent / 'b1.png'}: truncated (Pillow: Truncated File Read)",
    ]
