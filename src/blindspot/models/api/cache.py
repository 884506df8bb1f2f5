"""An API's replies kept on disk, so a rerun or a resumed job asks only for what it has no answer to yet.

One JSON file per key, `<folder>/<key[:2]>/<key>.json`, written atomically; the record is the
caller's, with the reply under "response". What is written and what is read back pass through the
caller's `clean` (a client's, which scrubs its key). Which replies to keep, and whether a cached one
can be used, is the caller's to say; a file that cannot be read at all is an UnreadableReply.

`AnsweredReplies` is the loop every model asked through the API client shares (the API judge, the API
VLMs): a reply is read from the cache when one there holds an answer, else asked until one does,
which is cached before it is returned; a reply without an answer is asked again with the client's
back-off up to `client.max_reply_attempts` times, and never cached. What counts as an answer is the
caller's (`failure`: why a reply holds none, a key of its `failures`, or None).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from blindspot.io import remove_stale_temps, write_json
from blindspot.models.api.client import ChatCompletionsClient, MalformedReply, backoff_delay
from blindspot.models.api.reply import failure_detail

log = logging.getLogger(__name__)


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


class Asked(NamedTuple):
    """What asking gave: the reply that holds an answer (cached), or None with the last failure, in words."""

    response: Any | None
    failure: str | None = None
    detail: str = ""


class AnsweredReplies:
    """A client's replies that hold an answer, kept in a ReplyCache; see the module doc."""

    def __init__(
        self,
        client: ChatCompletionsClient,
        cache: ReplyCache,
        failure: Callable[[Any], str | None],
        failures: Mapping[str, str],
    ):
        self.client, self.cache, self.failure, self.failures = client, cache, failure, failures

    def cached(self, key: str) -> Any | None:
        """The reply cached under `key`, or None when there is none or it cannot be used (a file cut short,
        or a reply without an answer an older version cached unchecked): then it is asked again and overwritten."""
        if not self.cache.holds(key):
            return None
        try:
            response = self.cache.response(key)
        except UnreadableReply as error:
            problem = str(error)
        else:
            failure = self.failure(response)
            if failure is None:
                return response
            problem = failure_detail(response, failure, self.failures)
        log.warning(
            "%s: the cached reply %s cannot be used (%s); asking again",
            self.client.name,
            self.cache.path(key),
            self.client.scrub(problem),
        )
        return None

    def ask(self, body: Mapping[str, Any], record: Mapping[str, Any], key: str) -> Asked:
        """Ask until a reply holds an answer, which is cached under `key` (`record` with the reply under
        "response") and returned; after the last try, None with why."""
        settings, name = self.client.settings, self.client.name
        tries = settings.max_reply_attempts
        for attempt in range(1, tries + 1):
            try:
                response = self.client.post(body)
            except MalformedReply as error:
                failure, detail = "malformed", f"malformed: {self.failures['malformed']} ({error})"
            else:
                failure = self.failure(response)
                if failure is None:  # checked, so a rerun can read what is cached
                    self.cache.store(key, {**record, "response": response})
                    return Asked(response)
                detail = failure_detail(response, failure, self.failures)
            if attempt < tries:
                wait = backoff_delay(attempt - 1, settings.backoff_base_s, settings.backoff_cap_s)
                log.warning("%s: no answer (%s); retry %d of %d in %.1f s", name, detail, attempt, tries - 1, wait)
                time.sleep(wait)
        log.warning("%s: no answer after %d tries, not cached (the next run asks again): %s", name, tries, detail)
        return Asked(None, failure, detail)
