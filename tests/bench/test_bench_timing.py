"""The measuring parts of bench/compare.py: arms take turns, and the dry run's project share counts
the project's code once per call stack."""

import cProfile
import sys

import pytest
from helpers.workflow import REPO

sys.path.insert(0, str(REPO / "bench"))
from peers.dry_run import project_share
from timing import Timed, overheads, timed_arms

from blindspot.humblebench.parsing import parse_answer

OPTIONS = ["red", "green", "blue", "white", "None of the above"]


def test_arms_take_turns_after_one_warm_up_each():
    calls = []
    arms = [lambda: calls.append("peer") or len(calls), lambda: calls.append("ours") or len(calls)]
    peer, ours = timed_arms(arms, repeats=2)
    assert calls == ["peer", "ours"] * 3
    assert (peer.result, ours.result) == (5, 6)
    assert len(peer.rounds) == len(ours.rounds) == 2


def test_overheads_set_fastest_against_fastest_beside_the_medians():
    base = Timed(seconds=1.2, result=None, rounds=[1.0, 1.2, 1.5])
    arm = Timed(seconds=1.5, result=None, rounds=[1.5, 1.03, 1.8])  # its fastest round came second
    fastest, medians = overheads(arm, base)
    assert fastest == pytest.approx(0.03)
    assert medians == pytest.approx(0.25)


def answers(n: int) -> list:
    return [parse_answer(f"The answer is {'ABCDE'[i % 5]}.", OPTIONS) for i in range(n)]


def busy(n: int) -> int:
    return sum(i * i for i in range(n))


@pytest.mark.parametrize(
    ("work", "low", "high"),
    [
        (lambda: answers(20000), 0.8, 1.0),  # nearly all of it inside the package
        (lambda: busy(2_000_000), 0.0, 0.0),  # none of it
        (lambda: (answers(4000), busy(600_000)), 0.05, 0.95),  # some: and nested project calls counted once
    ],
)
def test_the_project_share_counts_the_outermost_project_frames(tmp_path, work, low, high):
    profiler = cProfile.Profile()
    profiler.runcall(work)
    profiler.dump_stats(tmp_path / "run.prof")
    assert low <= project_share(tmp_path / "run.prof") <= high
