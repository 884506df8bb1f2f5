"""An API's replies kept on disk, so a rerun or a resumed job asks only for what it has no answer to yet.

One JSON file per key, `<folder>/<key[:2]>/<key>.json`, written atomically; the record is the
caller's, with the reply under "response". What is written and what is read back pass through the
caller's `clean` (a client's, which scrubs its key). Which replies to keep, and whether a cached one
can be used, is the caller's to say; a file that cannot be read at all is an UnreadableReply.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from blindspot.io import remove_stale_temps, write_json


class UnreadableReply(ValueError):
    """A cache file without a readable reply (cut short, not JSON, no "response"): why, in a line."""


class ReplyCache:
    """Replies under `folder`, one file per key; see the module doc."""

    def __init__(self, folder: str | Path, clean: Callable[[Any], Any]):
        self.folder = Path(folder)
        self._clean = clean

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def holds(self, key: str) -> bool:
        return self.path(key).exists()

    def response(self, key: str) -> Any:
        """The reply cached under `key`, cleaned; UnreadableReply when its file cannot be read."""
        try:
            return self._clean(json.loads(self.path(key).read_text())["response"])
        except (OSError, ValueError, RecursionError, KeyError, TypeError) as error:
            raise UnreadableReply(f"{type(error).__name__}: {str(error)[:200]}") from None

    def store(self, key: str, record: Mapping[str, Any]) -> None:
        """Write `record` (the reply under "response", and what it answers), cleaned, under `key`."""
        write_json(self.path(key), self._clean(record))

    def remove_stale_temps(self, keys: Iterable[str]) -> list[Path]:
        """Remove what a killed run left half-written for these keys (only these: other jobs may write
        theirs in the same folder); return what was removed."""
        return remove_stale_temps(self.path(key) for key in keys)
