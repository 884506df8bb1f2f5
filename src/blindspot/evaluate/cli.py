"""`blindspot evaluate`'s command line: its options, which are `blindspot.api.evaluate`'s arguments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from blindspot.config import ConfigError
from blindspot.evaluate.config import DEFAULT_CONFIG
from blindspot.evaluate.records import show_records
from blindspot.evaluate.run import evaluate


def _count(of: str) -> Any:
    """An option's type: a whole number, at least 1, of `of`."""

    def parse(text: str) -> int:
        if not text.isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {of} (a whole number, at least 1)")
        return int(text)

    return parse


def _rows(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of rows (a whole number; 0: all)")
    return int(text)


def add_parser(commands: Any) -> None:
    """`evaluate`'s subcommands, on the `blindspot` parser, and `--show` to read a run's per-item records."""
    parser = commands.add_parser("evaluate", help="score a metric or a VLM on a released benchmark, building nothing")
    parser.add_argument(
        "--show",
        metavar="FILE",
        help="instead of scoring: list a run's per-item records ({results_dir}/tables/*_records.jsonl), failures first",
    )
    parser.add_argument("--failures", action="store_true", help="with --show: the failures only")
    parser.add_argument("--rows", type=_rows, default=50, help="with --show: at most this many rows (0: all)")
    # not required: --show names none; `main` says so in one line when neither is given
    kinds = parser.add_subparsers(dest="benchmark")
    for name, help in (
        ("protobias", "a metric's Table 3 row on ProtoBias pairs"),
        ("humblebench", "a VLM's HumbleBench rows on the release"),
    ):
        sub = kinds.add_parser(name, help=help, description=help)
        sub.add_argument(
            "--configfile",
            help=f"the base config: models, settings, resources, its relative paths "
            f"the checkout's (default: the checkout's {DEFAULT_CONFIG})",
        )
        sub.add_argument("--results-dir", help="where the run writes (default {results_dir}/evaluate_<benchmark>)")
        sub.add_argument("--profile", help="a Snakemake profile, e.g. profiles/slurm (default: local)")
        sub.add_argument("--cores", type=_count("cores"), default=1, help="local cores without --profile")
        items = "pairs" if name == "protobias" else "questions"
        sub.add_argument(
            "--limit",
            type=_count(items),
            metavar="N",
            help=f"score a fixed sample of N {items}, the same for everyone, marked as a sample in "
            "every row and table (default: all)",
        )
        sub.add_argument(
            "--compare",
            action="append",
            default=[],
            help="earlier rows to print beside: a CSV of the table's rows, or a run's per-item records "
            "(*_records.jsonl, or beside the CSV in its tables/), then compared item by item",
        )
        if name == "protobias":
            sub.add_argument("--dataset", required=True, help="the export's folder or hub id, or a table of pairs")
            sub.add_argument(
                "--metric",
                action="append",
                required=True,
                help="a config's metric, or PLUGIN@MODEL: a plug-in (module:Class) and its model, a registry name, "
                "a folder or a hub id",
            )
            sub.add_argument(
                "--column",
                action="append",
                default=[],
                metavar="FIELD=COLUMN",
                help="a field's column: neutral_prompt, image_corr, image_adv, ...",
            )
        else:
            sub.add_argument("--release", required=True, help="HumbleBench's release: a file, folder or hub id")
            sub.add_argument(
                "--vlm",
                action="append",
                required=True,
                help="a model: its name in the config's registry (models:), its folder or its hub id (its entry then "
                "derived from its config.json and printed)",
            )
            sub.add_argument("--setting", action="append", default=[], help="a setting of the config (default all)")


def column_mapping(pairs: list[str]) -> dict[str, str]:
    """`--column FIELD=COLUMN` options as {field: column}."""
    malformed = [pair for pair in pairs if not pair.partition("=")[0] or "=" not in pair]
    if malformed:
        raise ConfigError(f"--column {malformed[0]!r} is not FIELD=COLUMN")
    return dict(pair.split("=", 1) for pair in pairs)


def main(args: Any) -> None:
    if args.show or not args.benchmark:
        if bool(args.show) == bool(args.benchmark):
            raise ConfigError(
                "evaluate: name a benchmark to score (protobias, humblebench) or --show FILE, not "
                f"{'both' if args.show else 'neither'}"
            )
        sys.stdout.write(show_records(args.show, args.failures, args.rows))
        return
    options = {
        "results_dir": args.results_dir,
        "configfile": args.configfile,
        "profile": args.profile,
        "cores": args.cores,
        "compare": args.compare,
        "limit": args.limit,
    }
    if args.benchmark == "protobias":
        options |= {"dataset": args.dataset, "metrics": args.metric, "columns": column_mapping(args.column)}
    else:
        options |= {"release": args.release, "vlms": args.vlm, "settings": args.setting}
    rows = evaluate(args.benchmark, **options)
    sys.stdout.write(rows.to_markdown(index=False) + "\n")
    sys.stdout.write(f"\nper-item records: {rows.attrs['records']} (blindspot evaluate --show FILE)\n")
    if "comparisons" in rows.attrs:
        sys.stdout.write(f"\n{Path(rows.attrs['comparisons']).read_text()}\n(also in {rows.attrs['comparisons']})\n")
