"""`blindspot verify` on a small results tree built by hand: images written as the render stage writes
them, listed in a render job's table with their hashes, then truncated, deleted or left alone."""

import shlex
from pathlib import Path

import pandas as pd
import pytest
import yaml
from PIL import Image

from blindspot import schemas, targets
from blindspot.cli import main
from blindspot.io import write_table
from blindspot.protobias.render import save_image


@pytest.fixture
def run(tiny_config, tmp_path):
    """A config whose results are in tmp_path, and one finished render job of it with three images."""
    tiny_config["results_dir"] = str(tmp_path / "results")
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(tiny_config))
    t2i = tiny_config["image_stage"]["t2i_models"][0]
    table = targets.path(tiny_config, "renders", domain="animals", t2i=t2i, shard="00000")
    images = Path(targets.path(tiny_config, "images", domain="animals", t2i=t2i))
    rows = []
    for index, colour in enumerate(["red", "green", "blue"]):
        path = images / f"image{index}.png"
        digest = save_image(Image.new("RGB", (8, 8), colour), path)
        rows.append(
            {
                "image_id": f"image{index}",
                "triplet_id": "t0",
                "role": "corr",
                "description": f"a {colour} cat",
                "t2i": t2i,
                "model_id": f"built:{t2i}",
                "model_revision": "",
                "seed": index,
                "steps": 1,
                "guidance": 0.0,
                "height": 8,
                "width": 8,
                "settings": "{}",
                "path": str(path),
                "sha256": digest,
            }
        )
    frame = pd.DataFrame(rows)
    write_table(table, frame, schemas.RENDERS)
    return str(configfile), table, [Path(row["path"]) for row in rows]


def verify(configfile: str, capsys) -> tuple[int, list[str]]:
    code = main(["verify", "--configfile", configfile])
    return code, capsys.readouterr().out.splitlines()


def test_intact_images_pass(run, capsys):
    configfile, _, _ = run
    assert verify(configfile, capsys) == (0, ["3 images match the sha256 recorded when they were written"])


def test_a_truncated_or_missing_image_names_its_job_and_the_command_that_reruns_it(run, capsys):
    configfile, table, images = run
    truncated, missing, intact = images
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    missing.unlink()
    code, lines = verify(configfile, capsys)
    assert code == 1
    assert lines[0] == (
        f"{truncated}: its sha256 is not the one recorded when it was written (written by the job of {table})"
    )
    assert lines[1] == f"{missing}: missing (written by the job of {table})"
    assert not any(str(intact) in line for line in lines)
    assert lines[2].startswith("2 bad of 3 images, from 1 render_images job(s)")
    assert shlex.split(lines[3]) == ["snakemake", "--configfile", configfile, "--forcerun", table]


def test_a_render_table_that_cannot_be_read_is_its_jobs_fault(run, capsys):
    configfile, table, _ = run
    Path(table).write_bytes(Path(table).read_bytes()[:100])
    code, lines = verify(configfile, capsys)
    assert code == 1
    assert lines[0].startswith(f"{table}: the table cannot be read (")
    assert shlex.split(lines[-1])[-1] == table


def test_jobs_not_run_yet_are_no_fault(tiny_config, tmp_path, capsys):
    tiny_config["results_dir"] = str(tmp_path / "nothing yet")
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(tiny_config))
    assert verify(str(configfile), capsys) == (
        0,
        [f"no rendered images to check: no render job of {configfile} has finished in {tmp_path / 'nothing yet'}"],
    )
