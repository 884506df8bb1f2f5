"""Loading an official release's weights into a port of its model, by a map of the port's weight names
to the release's keys: every mapped key must be there, and no release key may be left over but those
the port knowingly drops. A checkpoint that does not fit is one error naming the keys."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any


def load_mapped_state_dict(
    model: Any, state_dict: Mapping[str, Any], wanted: Mapping[str, str], ignored: Collection[str], what: str,
    source: str | Path, strict: bool,
) -> None:  # fmt: skip
    """Load `state_dict[wanted[name]]` into each weight `name` of `model`; `ignored` release keys may be
    left over. `strict` as `load_state_dict` takes it (False where the port has tied copies)."""
    missing = [key for key in wanted.values() if key not in state_dict]
    left_over = sorted(set(state_dict) - set(wanted.values()) - set(ignored))
    problems = []
    for kind, keys in (("missing", missing), ("left over (not mapped)", left_over)):
        if keys:
            shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
            problems.append(f"{len(keys)} key(s) {kind}: {shown}")
    if problems:
        raise ValueError(f"{what} checkpoint {source} does not fit the port: {'; '.join(problems)}")
    model.load_state_dict({name: state_dict[key] for name, key in wanted.items()}, strict=strict)
