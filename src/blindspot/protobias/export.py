"""The benchmark as a Hugging Face `datasets` folder: parquet with embedded images, and a dataset card."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from blindspot.io import atomic_dir
from blindspot.models.spec import ModelSpec

SPLITS = ("train", "test")
# Columns of the published dataset, besides the two images.
FIELDS = {
    "pair_id": "hash of the two image ids",
    "triplet_id": "hash of the generated triplet (shared by all pairs rendered from it)",
    "subcategory": "taxonomy subcategory",
    "neutral_prompt": "T: the neutral prompt every metric is evaluated with",
    "correct_description": "D_c: what I_corr was rendered from",
    "adversarial_description": "D_a: what I_adv was rendered from (more prototypical, one controlled change)",
    "correct_instance": "the less prototypical subject shown in I_corr",
    "adversarial_instance": "the prototypical subject shown in I_adv",
    "aux_element": "the auxiliary element that carries the controlled change",
    "knob": "the controlled attribute (count, colour_tone, layout_relation, spatial_placement, scale)",
    "correct_value": "the attribute's value in T and D_c",
    "adversarial_value": "the attribute's value in D_a",
    "t2i": "the text-to-image model",
    "seed": "the seed both images were rendered with",
    "generator": "the LLM that wrote the triplet",
    "vlm_scores": "JSON of each filter VLM's scores of both images",
}
IMAGES = {"image_corr": "corr_path", "image_adv": "adv_path"}


# Rows read, encoded and written at a time, and so the most images (two a row) the export holds in memory:
# a split is streamed through an on-disk Arrow file instead of built in memory, since a paper-scale test split
# is tens of GB of PNGs. 32 rows of two ~1.5 MB 1024x1024 PNGs is ~100 MB, the parquet row group that `datasets`
# itself aims for (`datasets.config.MAX_ROW_GROUP_SIZE`).
BATCH_ROWS = 32


def _image(path: str) -> dict[str, Any]:
    return {"bytes": Path(path).read_bytes(), "path": Path(path).name}


def _rows(frame: pd.DataFrame) -> Iterator[dict[str, Any]]:
    for row in frame.to_dict("records"):
        yield {name: row[name] for name in FIELDS} | {name: _image(row[column]) for name, column in IMAGES.items()}


def _write_split(frame: pd.DataFrame, target: Path, scratch: Path) -> None:
    """Write `frame`'s rows, in order, to the parquet file `target`, holding at most BATCH_ROWS rows' images."""
    from datasets import Dataset, Features, Image, Value

    features = Features(
        {name: Value("int64") if name == "seed" else Value("string") for name in FIELDS}
        | {name: Image() for name in IMAGES}
    )
    # `from_generator` spills to an Arrow file under its cache_dir; a folder inside the atomic one keeps that on
    # the output's filesystem, out of ~/.cache, and goes with the atomic folder if the job is killed.
    with tempfile.TemporaryDirectory(dir=scratch) as cache:
        dataset = Dataset.from_generator(
            _rows, features=features, gen_kwargs={"frame": frame}, cache_dir=cache, writer_batch_size=BATCH_ROWS
        )
        # Left to itself, to_parquet sizes row groups by first reading up to 1,000 rows' images into Python.
        dataset.to_parquet(str(target), batch_size=BATCH_ROWS)


def model_rows(models: Mapping[str, Sequence[ModelSpec]]) -> list[tuple[str, str, str]]:
    """The card's (role, model, licence) rows, in the order the roles and their models are given."""
    return [(role, spec.model_id, spec.licence or "see model card") for role, specs in models.items() for spec in specs]


def source_counts(benchmark: pd.DataFrame) -> pd.DataFrame:
    """Pairs per domain built only from taxonomy entries the paper names, and pairs per part of the
    seed whose entry the project added (`added_entries`; a pair may count under several parts)."""
    rows = {}
    for domain, entries in benchmark.groupby("domain")["added_entries"]:
        added = [entry.split(",") for entry in entries if entry]
        rows[domain] = {"pairs": len(entries), "paper only": len(entries) - len(added)}
        rows[domain] |= Counter(f"added {part}" for parts in added for part in parts)
    parts = sorted({name for row in rows.values() for name in row if name.startswith("added ")})
    columns = ["pairs", "paper only", *parts]
    return pd.DataFrame.from_dict(rows, orient="index", columns=columns).fillna(0).astype(int).rename_axis("domain")


def dataset_card(benchmark: pd.DataFrame, about: Mapping[str, Any]) -> str:
    """README.md with YAML front matter: one config per domain with train/test splits, then the
    fields, the counts per domain, split and model, how it was built and the models' licences."""
    domains = sorted(benchmark["domain"].unique())
    present = benchmark.groupby("domain")["split"].unique()
    front = {
        "pretty_name": about["name"],
        # The images carry their models' licences (listed below): the hub's form for such a licence.
        "license": "other",
        "license_name": "mixed-model-licences",
        "license_link": "README.md",
        "task_categories": ["text-to-image"],
        "tags": ["evaluation", "prototypicality-bias", "text-to-image-metrics"],
        "configs": [
            {
                "config_name": domain,
                # `datasets` refuses a declared split without rows, so only non-empty ones are listed.
                "data_files": [
                    {"split": split, "path": f"data/{domain}/{split}-*.parquet"}
                    for split in SPLITS
                    if split in present[domain]
                ],
            }
            for domain in domains
        ],
    }
    counts = benchmark.pivot_table(index="domain", columns="split", values="pair_id", aggfunc="count", fill_value=0)
    per_model = benchmark.pivot_table(index="t2i", columns="domain", values="pair_id", aggfunc="count", fill_value=0)
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False).strip(),
        "---",
        "",
        f"# {about['name']}",
        "",
        "Contrastive text-to-image evaluation pairs after *Prototypicality Bias Reveals Blindspots in",
        "Multimodal Evaluation Metrics* (arXiv 2601.04946). Each row is a neutral prompt T, an image",
        "I_corr that satisfies T with a less prototypical subject, and an image I_adv with a more",
        "prototypical subject that breaks one controlled attribute. A metric fails a row when",
        "M(T, I_adv) >= M(T, I_corr).",
        "",
        "```python",
        "from datasets import load_dataset",
        f'ds = load_dataset("path/to/this/folder", "{domains[0] if domains else "animals"}")',
        "```",
        "",
        "## Fields",
        "",
        "| field | meaning |",
        "| --- | --- |",
        *(f"| `{name}` | {meaning} |" for name, meaning in FIELDS.items()),
        "| `image_corr` | I_corr (PNG) |",
        "| `image_adv` | I_adv (PNG) |",
        "",
        "## Counts",
        "",
        "Pairs per domain and split:",
        "",
        counts.reindex(columns=list(SPLITS), fill_value=0).to_markdown(),
        "",
        "Pairs per text-to-image model and domain:",
        "",
        per_model.to_markdown(),
        "",
        "Pairs by where their taxonomy entries come from: each entry says `source: paper` when the",
        "paper names it (Appendix A.1, section 4.1) and `source: added` when this project chose it",
        "(docs/fidelity.md). *paper only* pairs use no added entry; an `added` column counts the pairs",
        "whose entry for that part is added.",
        "",
        source_counts(benchmark).to_markdown(),
        "",
        "## How it was built",
        "",
        f"Run `{about['run_name']}` of the blindspot workflow: taxonomy seeds, triplets written by the",
        "generator LLMs and kept only when every judge LLM accepted them, rendered with each",
        "text-to-image model, and kept only when every VLM scored both images at least",
        f"{about['threshold']} against their own descriptions. The split is at the triplet level: no",
        "triplet has pairs in both splits.",
        "",
        "## Models used and their licences",
        "",
        "| role | model | licence |",
        "| --- | --- | --- |",
        *(f"| {role} | {model} | {licence} |" for role, model, licence in about["models"]),
        "",
    ]
    return "\n".join(lines)


def export_dataset(benchmark: pd.DataFrame, out_dir: str | Path, about: Mapping[str, Any]) -> None:
    """Write the folder that `datasets.load_dataset(out_dir, domain)` reads."""
    with atomic_dir(out_dir) as tmp:
        for domain in sorted(benchmark["domain"].unique()):
            for split in SPLITS:
                rows = benchmark[(benchmark["domain"] == domain) & (benchmark["split"] == split)]
                if rows.empty:
                    continue
                target = tmp / "data" / domain / f"{split}-00000-of-00001.parquet"
                target.parent.mkdir(parents=True, exist_ok=True)
                _write_split(rows.sort_values("pair_id"), target, scratch=tmp)
        (tmp / "README.md").write_text(dataset_card(benchmark, about))
