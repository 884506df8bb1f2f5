"""Reading the per-item records a run writes (`schemas.RECORDS`: ProtoBias' pairs, HumbleBench's answers),
failures first: `blindspot.api.read_records(path)` from Python, `blindspot evaluate --show FILE` on a terminal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pyarrow as pa

from blindspot import schemas
from blindspot.comparisons import COMPARISON_COLUMNS, paired_comparisons, write_comparisons
from blindspot.config import ConfigError
from blindspot.humblebench import records as humble_records
from blindspot.humblebench.humility import image_clusters
from blindspot.io import jsonl_records, stable_id
from blindspot.protobias import records as protobias_records
from blindspot.protobias.records import UNSCORED

# Each kind of records file: its schema and the module that orders and counts its records.
KINDS: dict[str, tuple[pa.Schema, ModuleType]] = {
    "protobias": (schemas.PROTOBIAS_RECORDS, protobias_records),
    "humblebench": (schemas.HUMBLE_RECORDS, humble_records),
}
# The columns `--show` prints, in this order; the file has every field.
SHOWN = {
    "protobias": [
        "outcome",
        "metric",
        "margin",
        "corr_score",
        "adv_score",
        "domain",
        "knob",
        "prompt",
        "pair_id",
        "corr_image",
        "adv_image",
    ],
    "humblebench": [
        "outcome",
        "vlm",
        "setting",
        "question_id",
        "type",
        "question",
        "label",
        "prediction",
        "reading",
        "answer",
    ],
}


def _kind(record: dict, path: Path, number: int) -> str:
    """The kind whose fields the first record has the most of; a record of neither is a ConfigError."""
    name = max(KINDS, key=lambda kind: len(set(KINDS[kind][0].names) & set(record)))
    problem = schemas.record_problem(record, KINDS[name][0])
    if problem:
        raise ConfigError(f"{path}: line {number} {problem}: not a records file of {' or '.join(KINDS)}")
    return name


def read_records(path: str | Path) -> pd.DataFrame:
    """The records of a per-item records file (`{results_dir}/tables/protobias_records.jsonl` or
    `humblebench_records.jsonl`) as a DataFrame, the failures first (ProtoBias: the pairs the metric got
    wrong, the widest margin first, then the unscored; HumbleBench: the wrong answers, then the unreadable),
    then the rest. Its `attrs["benchmark"]` says which. A file that is not JSON lines, or a line without a
    record's fields, is an error naming the file and the line; a field added since the first records files
    (`schemas.is_added`) may be absent, and reads as null."""
    path = Path(path)
    kind, rows = None, []
    for number, record in jsonl_records(path):
        if kind is None:
            kind = _kind(record, path, number)
            added = dict.fromkeys(field.name for field in KINDS[kind][0] if schemas.is_added(field))
        problem = schemas.record_problem(record, KINDS[kind][0])
        if problem:
            raise ConfigError(f"{path}: line {number} {problem} (a {kind} record)")
        rows.append(added | record)
    if kind is None:
        raise ConfigError(f"{path}: no records (an empty file)")
    schema, module = KINDS[kind]
    found = module.failures_first(pd.DataFrame(rows, columns=schema.names))
    found.attrs["benchmark"] = kind
    return found


# How much of a text a cell of `--show` holds (an answer, a prompt): the file has all of it.
CELL_CHARS = 80


def _cell(value: object) -> object:
    """A text on one line, cut to CELL_CHARS; anything else as it is."""
    if not isinstance(value, str):
        return value
    text = " ".join(value.split())
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def show_records(path: str | Path, failures_only: bool = False, rows: int = 50) -> str:
    """The records as a readable table for a terminal, failures first (`read_records`), after a line per
    metric (or VLM and setting) counting its failures; only the failures with `failures_only`, and no more
    than `rows` of them (0: all)."""
    found = read_records(path)
    kind = found.attrs["benchmark"]
    module = KINDS[kind][1]
    lines = module.counts(found)
    picked = found[module.failed(found)] if failures_only else found
    shown = picked.head(rows) if rows else picked
    if len(shown) < len(picked):
        lines.append(f"the first {len(shown)} of {len(picked)} rows (--rows N shows N, --rows 0 all)")
    table = shown[SHOWN[kind]]
    if kind == "protobias":
        table = table.assign(**{c: table[c].round(4) for c in ("margin", "corr_score", "adv_score")})
    cells = table.astype(object).where(table.notna(), "").map(_cell)
    text = cells.to_markdown(index=False, disable_numparse=True)
    return "\n".join([*lines, "", text if len(table) else "(no rows)"]) + "\n"


# Per kind: the column naming a record's system, the one naming its item, and the one grouping the comparisons.
COMPARED = {"protobias": ("metric", "pair_id", None), "humblebench": ("vlm", "question_id", "setting")}


def _clusters(kind: str, records: pd.DataFrame, items: pd.Index) -> np.ndarray:
    """Per item, what its intervals resample it with: a pair's triplet (its prompt where the records do not name
    one), a question's image (`humility.image_clusters`)."""
    first = records.drop_duplicates(COMPARED[kind][1]).set_index(COMPARED[kind][1])
    if kind == "protobias":
        return first["triplet_id"].fillna(first["prompt"]).reindex(items).to_numpy()
    return image_clusters(list(items), first["image"].to_dict())


def records_comparisons(records: Mapping[str, pd.DataFrame], n_boot: int, seed: int) -> pd.DataFrame:
    """Every two systems of one benchmark's records (label: `read_records`' frame; each system named by its
    label after it, the label "" for none) compared on the items both scored (`comparisons.paired_comparisons`:
    per setting on HumbleBench), resampling what was built together: a pair's triplet, a question's image.
    Records of both benchmarks together are a ConfigError."""
    kinds = {frame.attrs["benchmark"] for frame in records.values()}
    if len(kinds) > 1:
        raise ConfigError(f"records of {' and '.join(sorted(kinds))} cannot be compared: give one benchmark's")
    kind = kinds.pop()
    system, item, group = COMPARED[kind]
    named = [
        frame.assign(system=frame[system] + (f" ({label})" if label else ""), scored=frame["outcome"] != UNSCORED)
        for label, frame in records.items()
    ]
    together = pd.concat(named, ignore_index=True).drop_duplicates(["system", item, *([group] if group else [])])
    frames = []
    for name, part in together.groupby(group, sort=False) if group else [("", together)]:
        order = list(dict.fromkeys(part["system"]))
        correct = part.pivot(index=item, columns="system", values="correct")[order]
        scored = part.pivot(index=item, columns="system", values="scored")[order]
        rng = np.random.default_rng([seed, int(stable_id("compared", name), 16)])
        compared = paired_comparisons(
            correct.fillna(False).astype(bool),
            _clusters(kind, part, correct.index),
            n_boot,
            rng,
            scored.fillna(False).astype(bool),
        )
        frames.append(compared.assign(**({group: name} if group else {})))
    found = pd.concat(frames, ignore_index=True)
    return found[[*([group] if group else []), *COMPARISON_COLUMNS]]


def write_records_comparisons(compared: pd.DataFrame, files: Sequence[str | Path], kind: str) -> None:
    """The comparisons of `records_comparisons` as CSV and Markdown (`comparisons.write_comparisons`)."""
    unit = {"protobias": "triplets (each with all of its pairs)", "humblebench": "images (each with its questions)"}
    caption = (
        "Every two systems of this run and the compared runs' records, on the items both scored: accuracy (%), the "
        f"difference with its 95% paired bootstrap interval (the same {unit[kind]} resampled for both), the items "
        "only A or only B got right, and McNemar's exact test on those, Holm-corrected"
        + (" within the setting." if kind == "humblebench" else ".")
    )
    write_comparisons(compared, files, caption, items="Pairs" if kind == "protobias" else "Questions")
