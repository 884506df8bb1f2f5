"""`blindspot verify`: every rendered image of a run checked against the sha256 its render job recorded.

Snakemake checks outputs, and a render job's outputs are its table of images (`renders`), not the
images folder, which every shard of a domain and model shares. So an image truncated or changed after
its job finished goes unseen until a later step reads it. Each `renders` table row holds the image's
path and the hash of the bytes the job wrote; an image that is missing or whose bytes hash otherwise is
bad, and so is a table that cannot be read. The job that made it, run again, renders what is missing
or does not match its sidecar (`blindspot.protobias.render`), and Snakemake re-runs what read it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blindspot import schemas, targets
from blindspot.io import read_table
from blindspot.protobias.render import sha256_of


@dataclass(frozen=True)
class BadFile:
    path: str
    problem: str
    job_output: str  # the render job's table, whose job makes the file again


def check_renders(table_path: str) -> tuple[int, list[BadFile]]:
    """How many images one render job's table lists, and those of them (or the table) that are bad."""
    try:
        renders = read_table(table_path, schemas.RENDERS)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        return 0, [BadFile(table_path, f"the table cannot be read ({' '.join(str(error).split())})", table_path)]
    bad = []
    for image, recorded in zip(renders["path"], renders["sha256"], strict=True):
        if not Path(image).is_file():
            bad.append(BadFile(image, "missing", table_path))
        elif sha256_of(Path(image)) != recorded:
            bad.append(BadFile(image, "its sha256 is not the one recorded when it was written", table_path))
    return len(renders), bad


def verify_images(config: dict[str, Any]) -> tuple[int, list[BadFile]]:
    """Every image of the finished render jobs of `config` (a job not run yet is no fault)."""
    checked, bad = 0, []
    for domain in config["domains"]:
        for table_path in targets.render_targets(config, domain):
            if Path(table_path).exists():
                count, found = check_renders(table_path)
                checked += count
                bad += found
    return checked, bad


def rerun_command(configfile: str, bad: list[BadFile]) -> str:
    """The Snakemake command that runs the jobs of the bad files again, and what depends on them."""
    outputs = sorted({file.job_output for file in bad})
    return shlex.join(["snakemake", "--configfile", configfile, "--forcerun", *outputs])


def report(configfile: str, results_dir: str, checked: int, bad: list[BadFile]) -> str:
    if not checked and not bad:  # nothing has run, or the config or the current folder is not the run's
        return f"no rendered images to check: no render job of {configfile} has finished in {results_dir}\n"
    if not bad:
        return f"{checked} images match the sha256 recorded when they were written\n"
    outputs = sorted({file.job_output for file in bad})
    lines = [f"{file.path}: {file.problem} (written by the job of {file.job_output})" for file in bad]
    lines += [
        f"{len(bad)} bad of {checked} images, from {len(outputs)} render_images job(s); run them again (add your "
        "usual options, e.g. --profile), and Snakemake re-runs the jobs that read their images:",
        rerun_command(configfile, bad),
    ]
    return "\n".join(lines) + "\n"
