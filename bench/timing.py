"""What every comparison in bench/compare.py shares: how an arm is timed, how an arm in another
environment reports, and the row each comparison returns."""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Row:
    """One line of the table: seconds per arm (medians), whether their outputs agree, and how."""

    what: str
    peer: str  # what the peer arm runs
    peer_seconds: float
    ours_seconds: float
    agree: bool | None  # None where the arms have no outputs to compare
    detail: str  # what "agree" compared, and anything a reader needs beside the numbers

    @property
    def speedup(self) -> float:
        return self.peer_seconds / self.ours_seconds


class Timed(NamedTuple):
    """One arm's median seconds, its last call's result, and every round's seconds."""

    seconds: float
    result: Any
    rounds: list[float]


def timed_arms(arms: Sequence[Callable[[], Any]], repeats: int) -> list[Timed]:
    """Per arm, the wall times of `repeats` calls after one warm-up call, and its last call's result.
    The arms take turns, so a change in the machine's load falls on both."""
    results = [arm() for arm in arms]
    seconds: list[list[float]] = [[] for _ in arms]
    for _ in range(repeats):
        for index, arm in enumerate(arms):
            started = time.perf_counter()
            results[index] = arm()
            seconds[index].append(time.perf_counter() - started)
    return [Timed(statistics.median(times), result, times) for times, result in zip(seconds, results, strict=True)]


def overheads(arm: Timed, base: Timed) -> tuple[float, float]:
    """How much longer `arm` took than `base`: fastest round against fastest, and median against median."""
    return min(arm.rounds) / min(base.rounds) - 1, arm.seconds / base.seconds - 1


def timed(arm: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """`timed_arms` of one arm: its median seconds and last result."""
    seconds, result, _ = timed_arms([arm], repeats)[0]
    return seconds, result


def run_in_env(python: str, script: Path, *args: str) -> dict[str, Any]:
    """Run a benchmark arm in another environment (`python` relative to the repository); it writes one
    JSON object as its last line of stdout, which is returned. Its stderr passes through."""
    interpreter = REPO / python
    if not interpreter.exists():
        raise SystemExit(f"{python} is missing: build it with ./setup.sh (see the README's benchmark section)")
    result = subprocess.run(
        [str(interpreter), str(script), *args], cwd=REPO, stdout=subprocess.PIPE, text=True, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])
