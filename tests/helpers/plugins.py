import re
from pathlib import Path

import pandas as pd
from PIL import Image

from blindspot import schemas
from blindspot.io import write_table
from blindspot.protobias.split import split_of
from helpers.workflow import REPO

DOCS = (REPO / "docs" / "metrics.md").read_text()


LOCAL_MODULE = "local_colour_share"  # the example as a module on the path; installed, it is `colour_share`


RED, BLUE = (220, 40, 40), (40, 80, 220)


def docs_file(name: str) -> str:
    """The fenced block of docs/metrics.md whose first line is `# name`."""
    found = re.search(rf"```\w+\n# {re.escape(name)}\n(.*?)```", DOCS, re.DOTALL)
    assert found, f"docs/metrics.md shows no {name}"
    return found[1]


def solid(colour) -> Image.Image:
    return Image.new("RGB", (16, 16), colour)


def write_benchmark_inputs(results: Path, domain: str, seed: int, test_fraction: float) -> None:
    """One test seed of `domain` with one kept pair: a red image (correct) and a blue one (adversarial)
    for "a red apple", the tables as the workflow's upstream rules write them."""
    seed_id = next(f"s{i}" for i in range(100) if split_of(f"s{i}", seed, test_fraction) == "test")
    folder = results / domain
    folder.mkdir(parents=True)
    for name, colour in (("corr", RED), ("adv", BLUE)):
        solid(colour).save(folder / f"{name}.png")
    seeds = dict.fromkeys(schemas.SEEDS.names, "") | {"seed_id": seed_id, "domain": domain, "sample_seed": 0}
    write_table(folder / "seeds.parquet", pd.DataFrame([seeds]), schemas.SEEDS)
    triplet = {field.name: "" for field in schemas.TRIPLETS} | {
        "triplet_id": "t0",
        "seed_id": seed_id,
        "domain": domain,
        "neutral_prompt": "a red apple",
    }
    write_table(folder / "triplets.parquet", pd.DataFrame([triplet]), schemas.TRIPLETS)
    pair = {
        "pair_id": "p0",
        "triplet_id": "t0",
        "t2i": "tiny-sd",
        "seed": 0,
        "corr_image_id": "c",
        "corr_path": str(folder / "corr.png"),
        "adv_image_id": "a",
        "adv_path": str(folder / "adv.png"),
        "vlm_scores": "{}",
        "min_corr_score": 1.0,
        "min_adv_score": 1.0,
        "kept": True,
    }
    write_table(folder / "pairs.parquet", pd.DataFrame([pair]), schemas.PAIRS)


# Each pair's prompt names red; by row number modulo 3 its corr image is red and its adv blue (ColourShare
# 1.0 > 0.0: right), the reverse (0.0 < 1.0: wrong), or both blue (0.0 = 0.0: a tie, wrong).
COLOUR_PAIRS = {0: (RED, BLUE, True), 1: (BLUE, RED, False), 2: (BLUE, BLUE, False)}


PLUGIN = f"{LOCAL_MODULE}:ColourShare"
