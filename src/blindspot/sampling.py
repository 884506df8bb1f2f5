"""A fixed sample of a benchmark's items (`dataset.limit`, `humblebench.limit`, `blindspot evaluate --limit`):
the same N items for everyone, whatever the seed or the order the items come in, and how a table made from it
says so. The papers score every item; sampling is this tool's, for trying a model or metric on a few first."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from blindspot.io import read_json

# The column that marks a sampled table's CSV, and `blindspot evaluate`'s rows.
COLUMN = "sample"
# What that column says of a row scored on every item.
ALL = "all"


def _shares(sizes: Sequence[int], n: int) -> list[int]:
    """`n` split among strata of `sizes` in proportion (largest remainder; ties to the larger stratum, then the
    earlier). When `n` is at least the number of strata, a stratum left without a row takes one from the
    stratum most above its quota."""
    quotas = [n * size / sum(sizes) for size in sizes]
    shares = [int(quota) for quota in quotas]
    for i in sorted(range(len(sizes)), key=lambda i: (shares[i] - quotas[i], -sizes[i], i))[: n - sum(shares)]:
        shares[i] += 1
    if n >= len(sizes):
        for empty in [i for i, share in enumerate(shares) if share == 0]:
            donor = max((i for i, share in enumerate(shares) if share > 1), key=lambda i: (shares[i] - quotas[i], -i))
            shares[donor] -= 1
            shares[empty] += 1
    return shares


def stratified_sample(frame: pd.DataFrame, strata: Sequence[str], id_column: str, n: int | None) -> pd.DataFrame:
    """`n` rows of `frame`, the same for any order of its rows: each stratum (a combination of the `strata`
    columns' values) gets a share in proportion to its size, every stratum at least one row when `n` is at
    least the number of strata, and within a stratum the rows come by the sha256 of their `id_column`. The
    rows stay in their order in `frame`. `n` None, or at least the rows there are, gives `frame` whole."""
    if n is None or n >= len(frame):
        return frame
    ids = frame[id_column].astype(str).tolist()
    rank = [(hashlib.sha256(value.encode()).hexdigest(), value) for value in ids]
    groups: dict[tuple[str, ...], list[int]] = {}
    for position, key in enumerate(frame[list(strata)].astype(str).itertuples(index=False, name=None)):
        groups.setdefault(key, []).append(position)
    ordered = sorted(groups.items())
    shares = _shares([len(rows) for _, rows in ordered], n)
    chosen = [
        row
        for (_, rows), share in zip(ordered, shares, strict=True)
        for row in sorted(rows, key=rank.__getitem__)[:share]
    ]
    return frame.iloc[sorted(chosen)]


def sample_record(limit: int | None, sampled: int, total: int) -> dict[str, int | None]:
    """What a sampling step writes in its counters (`"sample"`): the limit asked for, the items kept, and
    the items there were."""
    return {"limit": limit, "sampled": sampled, "total": total}


def read_sample(counters: Sequence[str]) -> dict[str, Any] | None:
    """The sample record in a sampling step's counters (a list of none or one file, as a rule's input)."""
    return read_json(counters[0])["sample"] if counters else None


def sample_label(record: Mapping[str, Any] | None, unit: str) -> str | None:
    """A sample's label, "2 of 812 pairs"; None for every item (or no record)."""
    if record is None or record["sampled"] >= record["total"]:
        return None
    return f"{record['sampled']} of {record['total']} {unit}"


def marked_caption(caption: str, label: str | None) -> str:
    """A table's caption, beginning by saying it is on a sample when `label` names one."""
    return f"[A sample: {label}, not the whole benchmark] {caption}" if label else caption


def marked_table(table: pd.DataFrame, label: str | None) -> pd.DataFrame:
    """A table's CSV with a `sample` column on every row when `label` names a sample, else as it is."""
    return table.assign(**{COLUMN: label}) if label else table
