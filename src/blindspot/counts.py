"""The benchmark's expected size beside the paper's: the seeds followed through the configured
acceptance shares to triplets, pairs and train pairs (`expected_counts`), the shares a finished run
measured (`measured_acceptance`), and the Markdown section that `blindspot plan` and a dry run of a
config that records the paper's counts (`paper:`) print."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot import catalogue, targets
from blindspot.io import read_json


def benchmark_size(config: dict[str, Any]) -> dict[str, Any]:
    """The counts the run should reach beside the paper's, the acceptance shares they rest on, and the
    paper's domains the run leaves out (what a dry run prints too: no job table needed)."""
    return {
        "counts": expected_counts(config),
        "acceptance": acceptance_table(config),
        "paper_domains_not_run": sorted(set(config.get("paper", {}).get("domains", {})) - set(config["domains"])),
    }


def seeds_for(triplets: int, generators: int, acceptance: float) -> int:
    """Seeds whose candidate triplets, one per generator, give `triplets` accepted ones at `acceptance`."""
    return math.ceil(triplets / (generators * acceptance))


def measured_acceptance(config: dict[str, Any]) -> pd.DataFrame:
    """Per domain, the shares a run under the config's `results_dir` kept: accepted of generated triplets
    (its triplet counters) and kept of candidate pairs (its pair counters); NaN where a file is not there."""
    rows = []
    for domain in config["domains"]:
        shares = {}
        for kind, (kept, of) in {"triplet": ("accepted", "generated"), "pair": ("pairs_kept", "pairs_in")}.items():
            path = Path(targets.path(config, f"{kind}_counters", domain=domain))
            counters = read_json(path) if path.is_file() else {}
            shares[kind] = counters[kept] / counters[of] if counters.get(of) else float("nan")
        rows.append({"domain": domain, "triplets": shares["triplet"], "pairs": shares["pair"]})
    return pd.DataFrame(rows, columns=["domain", "triplets", "pairs"])


COUNT_COLUMNS = [
    "domain",
    "seeds",
    "candidate_triplets",
    "triplets",
    "paper_triplets",
    "pairs",
    "paper_pairs",
    "pairs_per_triplet",
    "paper_pairs_per_triplet",
    "train_pairs",
    "paper_train_pairs",
]


def expected_counts(config: dict[str, Any]) -> pd.DataFrame:
    """Per domain and in total (`domain` "total"): the run's seeds and candidate triplets, the triplets,
    pairs and train pairs it should end with, and the paper's (`paper:`) beside them.

    Expected triplets are the candidates (one per seed and generator) times
    `prompt_stage.expected_acceptance`; each gives `catalogue.pairs_per_triplet` candidate pairs, kept at
    `image_stage.expected_acceptance`; train pairs are the rest of `benchmark.test_fraction`. A missing
    rate, or a domain the paper does not count, gives NaN.
    """
    generators = len(config["prompt_stage"]["generators"])
    triplet_share = config["prompt_stage"].get("expected_acceptance", float("nan"))
    pair_share = config["image_stage"].get("expected_acceptance", float("nan"))
    paper = config.get("paper", {})
    rows = []
    for domain, spec in config["domains"].items():
        triplets = spec["n_seeds"] * generators * triplet_share
        pairs = triplets * catalogue.pairs_per_triplet(config) * pair_share
        counted = paper.get("domains", {}).get(domain, {})
        rows.append(
            {
                "domain": domain,
                "seeds": spec["n_seeds"],
                "candidate_triplets": spec["n_seeds"] * generators,
                "triplets": triplets,
                "paper_triplets": counted.get("triplets", float("nan")),
                "pairs": pairs,
                "paper_pairs": counted.get("pairs", float("nan")),
            }
        )
    frame = pd.DataFrame(rows)
    total = frame.drop(columns="domain").sum(skipna=False)
    frame = pd.concat([frame, pd.DataFrame([{"domain": "total", **total}])], ignore_index=True)
    frame["pairs_per_triplet"] = frame["pairs"] / frame["triplets"]
    frame["paper_pairs_per_triplet"] = frame["paper_pairs"] / frame["paper_triplets"]
    frame["train_pairs"] = frame["pairs"] * (1 - config["benchmark"]["test_fraction"])
    # The paper gives the train split only for the whole benchmark: its total row, if the run has every domain.
    whole = set(paper.get("domains", {})) <= set(config["domains"])
    frame["paper_train_pairs"] = float("nan")
    if whole and "train_pairs" in paper:
        frame.loc[frame["domain"] == "total", "paper_train_pairs"] = paper["train_pairs"]
    return frame[COUNT_COLUMNS].astype({"seeds": "Int64", "candidate_triplets": "Int64"})


def acceptance_table(config: dict[str, Any]) -> pd.DataFrame:
    """Per domain: the acceptance shares the config assumes and a run under its `results_dir` measured,
    and the seeds that give the paper's triplets at the measured share (else the assumed one)."""
    measured = measured_acceptance(config).set_index("domain")
    generators = len(config["prompt_stage"]["generators"])
    paper = config.get("paper", {}).get("domains", {})
    rows = []
    for domain, spec in config["domains"].items():
        assumed = config["prompt_stage"].get("expected_acceptance", float("nan"))
        share = measured.loc[domain, "triplets"] if pd.notna(measured.loc[domain, "triplets"]) else assumed
        target = paper.get(domain, {}).get("triplets")
        rows.append(
            {
                "domain": domain,
                "triplets_assumed": assumed,
                "triplets_measured": measured.loc[domain, "triplets"],
                "pairs_assumed": config["image_stage"].get("expected_acceptance", float("nan")),
                "pairs_measured": measured.loc[domain, "pairs"],
                "seeds": spec["n_seeds"],
                "seeds_for_paper": seeds_for(target, generators, share) if target and share > 0 else pd.NA,
            }
        )
    return pd.DataFrame(rows).astype({"seeds_for_paper": "Int64"})


def number_table(frame: pd.DataFrame, decimals: dict[str, int]) -> str:
    """A Markdown table of a label column and numbers: `decimals` places for the named columns, whole
    numbers with thousands separators for the others, "n/a" for a missing value; numbers right-aligned."""
    frame = frame.copy()
    for column in frame.columns[1:]:
        places = decimals.get(column, 0)
        frame[column] = frame[column].map(lambda v, places=places: "n/a" if pd.isna(v) else f"{v:,.{places}f}")
    align = ["left"] + ["right"] * (frame.shape[1] - 1)
    return frame.to_markdown(index=False, disable_numparse=True, colalign=align)


def counts_section(config: dict[str, Any]) -> list[str]:
    """`render_counts` of a config alone (what a dry run prints): no job table needed."""
    return render_counts(benchmark_size(config))


def render_counts(result: dict[str, Any]) -> list[str]:
    """The plan's section on the benchmark's size: expected counts beside the paper's, and the acceptance
    shares they rest on."""
    shares = dict.fromkeys(("triplets_assumed", "triplets_measured", "pairs_assumed", "pairs_measured"), 3)
    lines = [
        "## Counts: expected beside the paper's",
        "",
        number_table(result["counts"], {"pairs_per_triplet": 2, "paper_pairs_per_triplet": 2}),
        "",
        "Expected triplets = seeds x generators x `prompt_stage.expected_acceptance`; each accepted triplet gives "
        "images_per_description x T2I models candidate pairs (I_corr and I_adv of one model and noise seed), kept at "
        "`image_stage.expected_acceptance`; train pairs = pairs x (1 - `benchmark.test_fraction`).",
        "",
        "## Acceptance: assumed in the config, measured by a run in `results_dir`",
        "",
        number_table(result["acceptance"], shares),
        "",
        "`seeds_for_paper`: seeds that give the paper's triplets at the measured share, else the assumed one; "
        "set `domains.<name>.n_seeds` to it.",
    ]
    if result["paper_domains_not_run"]:
        lines += ["", f"`paper.domains` not in this run: {', '.join(result['paper_domains_not_run'])}."]
    return lines
