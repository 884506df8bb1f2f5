"""Prompt templates kept in versioned files; every row records the version it was written with."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


@functools.lru_cache(maxsize=64)
def _compiled(source: str) -> jinja2.Template:
    """A template's text compiled once: compiling costs more than rendering, and a job renders one per item."""
    return _ENV.from_string(source)


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    version: str  # "<name>/v<n>+<sha256 prefix of the file>": edits without a bump still show
    system: str
    user: str

    @classmethod
    def load(cls, path: str | Path) -> PromptTemplate:
        raw = Path(path).read_bytes()
        spec = yaml.safe_load(raw)
        missing = {"name", "version", "system", "user"} - set(spec)
        if missing:
            raise ValueError(f"prompt template {path} lacks {sorted(missing)}")
        digest = hashlib.sha256(raw).hexdigest()[:8]
        return cls(spec["name"], f"{spec['name']}/v{spec['version']}+{digest}", spec["system"], spec["user"])

    def render(self, **fields: Any) -> list[dict[str, str]]:
        """Chat messages for one item; a field the template uses but was not given is an error."""
        return [
            {"role": "system", "content": _compiled(self.system).render(**fields).strip()},
            {"role": "user", "content": _compiled(self.user).render(**fields).strip()},
        ]
