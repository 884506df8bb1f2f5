"""`python -m blindspot.steps`: run a job again from its job file, or one job of a config by hand."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from blindspot import steps
from blindspot.catalogue import STEPS
from blindspot.checks import load_config
from blindspot.config import ConfigError
from blindspot.dag import job_arguments_and_outputs, output_paths


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m blindspot.steps", description=steps.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    again = commands.add_parser("replay", help="run a job again from the .job.json file beside its log")
    again.add_argument("job_file")
    run = commands.add_parser("run", help="run one job of a config by hand, with the arguments the workflow gives it")
    run.add_argument("step", choices=list(STEPS))
    run.add_argument("--configfile", required=True)
    run.add_argument("wildcards", nargs="*", metavar="NAME=VALUE", help="the job's wildcards, e.g. domain=animals")
    # Wildcards may also follow --configfile, where argparse no longer takes positionals.
    args, rest = parser.parse_known_args(argv)
    if rest and (args.command != "run" or not all("=" in word for word in rest)):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    steps.setup_logging()
    if args.command == "replay":
        steps.replay(args.job_file)
        return
    words = [*args.wildcards, *rest]
    if not all("=" in word for word in words):
        parser.error(f"wildcards are NAME=VALUE, not {' '.join(word for word in words if '=' not in word)}")
    wildcards = dict(word.split("=", 1) for word in words)
    try:
        arguments, outputs = job_arguments_and_outputs(load_config(args.configfile), args.step, wildcards)
    except (ConfigError, ValueError) as error:
        parser.exit(2, f"{error}\n")
    steps.remove_killed_runs_temps(output_paths(arguments, outputs))
    steps.run_step(args.step, **arguments)


if __name__ == "__main__":
    main()
