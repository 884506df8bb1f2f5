"""Shards: a fixed slice of each domain's sorted rows, so the job count is known when the workflow is
parsed and grows with shards, not items; or, for HumbleBench's answers, a hash of each question's id."""

from __future__ import annotations

import hashlib
import math


def n_shards(n_rows: int, shard_size: int) -> int:
    return max(1, math.ceil(n_rows / shard_size))


def shard_names(n_rows: int, shard_size: int) -> list[str]:
    return [f"{i:05d}" for i in range(n_shards(n_rows, shard_size))]


def shard_slice(shard: str, shard_size: int) -> slice:
    start = int(shard) * shard_size
    return slice(start, start + shard_size)


def shard_of(item_id: str, shards: int) -> int:
    """An item's shard of `shards`, from its id alone: adding items never moves the others."""
    return int(hashlib.sha256(item_id.encode()).hexdigest()[:8], 16) % shards
