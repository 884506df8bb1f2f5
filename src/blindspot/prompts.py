"""Prompt templates kept in versioned files; every row records the version it was written with."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)
REQUIRED = ("name", "version", "user")  # a template file's keys
KEYS = (*REQUIRED, "system", "rubric", "verbatim")


@functools.lru_cache(maxsize=64)
def _compiled(source: str) -> jinja2.Template:
    """A template's text compiled once: compiling costs more than rendering, and a job renders one per item."""
    return _ENV.from_string(source)


@dataclass(frozen=True)
class PromptTemplate:
    """A chat prompt: a user message and, unless `system` is empty, a system message before it (some
    peers send none: the model's chat template then adds its own default, if it has one).

    `rubric` (optional in the file, "" without it) is plain text the messages use as `{{ rubric }}`,
    and that people are shown as their instructions when they score what a model scores (the
    annotation projects), so both work to the same rubric.

    A message's surrounding whitespace is dropped, unless `verbatim` (optional, false): a prompt quoted
    word for word from a peer's code sends its indentation and its trailing spaces too."""

    name: str
    version: str  # "<name>/v<n>+<sha256 prefix of its content>": edits without a bump still show
    system: str
    user: str
    rubric: str = ""
    path: str = ""  # the file, for messages
    verbatim: bool = False

    @classmethod
    def load(cls, path: str | Path) -> PromptTemplate:
        """The template in `path`; ValueError with one line naming the file when it is not one."""
        raw = Path(path).read_bytes()
        try:
            spec = yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise ValueError(f"prompt template {path} is not YAML: {' '.join(str(error).split())}") from None
        if not isinstance(spec, dict):
            raise ValueError(f"prompt template {path} is not a mapping with name, version and user")
        missing = set(REQUIRED) - set(spec)
        if missing:
            raise ValueError(f"prompt template {path} lacks {sorted(missing)}")
        unknown = sorted(map(str, set(spec) - set(KEYS)))
        if unknown:  # a misspelt `sytem:` would otherwise drop the system message unseen
            raise ValueError(f"prompt template {path}: unknown key {unknown[0]!r} (keys: {', '.join(KEYS)})")
        for part in ("system", "user"):  # compiled (once) here, so a syntax error names the file
            if not isinstance(spec.get(part) or "", str):
                raise ValueError(f"prompt template {path}: its {part} message is not text")
            try:
                _compiled(spec.get(part) or "")
            except jinja2.TemplateSyntaxError as error:
                raise ValueError(
                    f"prompt template {path}: its {part} message, line {error.lineno}: {error.message}"
                ) from None
        rubric = spec.get("rubric") or ""
        if not isinstance(rubric, str):
            raise ValueError(f"prompt template {path}: its rubric is not text")
        # of the content, not the file's bytes: a comment's edit re-runs nothing, nor re-buys an API's scores
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
        version = f"{spec['name']}/v{spec['version']}+{digest}"
        verbatim = spec.get("verbatim", False)
        if not isinstance(verbatim, bool):
            raise ValueError(f"prompt template {path}: verbatim is {verbatim!r}, not true or false")
        return cls(spec["name"], version, spec.get("system") or "", spec["user"], rubric, str(path), verbatim)

    def render(self, **fields: Any) -> list[dict[str, str]]:
        """Chat messages for one item, with the template's own `rubric`; a field the template uses but
        was not given is an error, and so is a field named `rubric` (it would replace the template's)."""
        if "rubric" in fields:
            raise ValueError(f"prompt template {self.name}: `rubric` is the template's own, not a field to give")
        fields["rubric"] = self.rubric
        try:
            system, user = (_compiled(part).render(**fields) for part in (self.system, self.user))
            if not self.verbatim:
                system, user = system.strip(), user.strip()
        except jinja2.UndefinedError as error:  # a misspelt field: the job stops with the file named
            raise ValueError(f"prompt template {self.path or self.name}: {error.message}") from None
        user_message = {"role": "user", "content": user}
        return [{"role": "system", "content": system}, user_message] if system else [user_message]
