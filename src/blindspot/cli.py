"""`blindspot`: plan a run, measure its throughput, list targets for a partial re-run, and run the
human annotation of its subsets.

blindspot plan --configfile config/config.yaml [--format md|csv]
blindspot throughput --configfile config/config.yaml results/benchmarks
blindspot targets --configfile config/config.yaml --domain animals --rule render_images
blindspot fetch-models --configfile config/config.yaml [--dry-run]
blindspot doctor --configfile config/config.yaml [--profile profiles/slurm]
blindspot verify --configfile config/config.yaml
blindspot annotate make --task pairwise --items results/benchmark/annotation/preference_pairs.parquet \
    --annotators alice,bob --out annotation/pairwise
blindspot annotate serve annotation/pairwise [--host 127.0.0.1] [--port 8765]
blindspot annotate export annotation/pairwise labels.json [--email alice=alice@lab.org]
blindspot annotate push annotation/pairwise [--url http://127.0.0.1:8080]   # token in LABEL_STUDIO_API_KEY
blindspot annotate pull annotation/pairwise labels.json [--email alice=alice@lab.org]
blindspot evaluate protobias --dataset results/tiny/benchmark/dataset --metric clipscore [--compare rows.csv]
blindspot evaluate humblebench --release HumbleBench.jsonl --vlm tiny-qwen2.5-vl [--setting original]
blindspot humble score results/ --questions HumbleBench.jsonl --out scored [--configfile config/config.yaml]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import pandas as pd
import yaml

from blindspot import bill, catalogue, physical_bound, plan, verify
from blindspot.annotation.projects import TASKS
from blindspot.checks import load_config
from blindspot.config import ConfigError, one_line
from blindspot.counts import render_counts
from blindspot.dag import checkout_config
from blindspot.doctor import report as doctor_report
from blindspot.doctor import run as doctor
from blindspot.evaluate import cli as evaluate_cli
from blindspot.hub import fetch as hub_fetch
from blindspot.paths import CHECKOUT

# The config of `humble score` and `annotate make` without --configfile or --judge-template: the checkout's.
CHECKOUT_CONFIG = "config/config.yaml"


def _port(text: str) -> int:
    port = int(text) if text.isdigit() else -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (a whole number from 0 to 65535)")
    return port


def _hours(value: float) -> str:
    return "n/a" if pd.isna(value) else f"{value:.2f}"


def _markdown(frame: pd.DataFrame) -> str:
    frame = frame.copy()
    for column in ("load_gpu_hours", "gpu_hours", "gpu_hours_upper", "bound_gpu_hours"):
        if column in frame:
            frame[column] = frame[column].map(_hours)
    if "bound_ratio" in frame:
        frame["bound_ratio"] = frame["bound_ratio"].map(lambda r: "" if pd.isna(r) else f"{r:.1f}")
    frame = frame.astype(object).where(frame.notna(), "")
    return frame.to_markdown(index=False, disable_numparse=True)


def render_bill(frame: pd.DataFrame) -> list[str]:
    """The API models' section of the plan: a row per API metric and per API VLM's answers, the total and
    how it was estimated."""
    if frame.empty:
        return []
    shown = pd.DataFrame(
        {
            "step": frame["step"],
            "metric": frame["metric"],
            "model": frame["model"],
            **{
                column: frame[column].map(lambda n: "n/a" if pd.isna(n) else f"{int(n):,}")
                for column in ("requests", "input_tokens", "image_tokens", "output_tokens")
            },
            "cost_usd": frame["cost_usd"].map(lambda c: "n/a" if pd.isna(c) else f"{c:,.2f}"),
            "prices_read": frame["prices_read"].replace("", "no `prices`"),
        }
    )
    total = bill.total_cost(frame)
    return [
        "## API models: requests, tokens and cost",
        "",
        _markdown(shown.rename(columns={"output_tokens": "output_tokens (at most)"})),
        "",
        f"Total: {'n/a' if pd.isna(total) else f'{total:,.2f}'} USD. " + bill.NOTE,
        "",
    ]


def render_plan(result: dict[str, Any], configfile: str, fmt: str) -> str:
    missing = result["missing"]
    total = _hours(result["total_gpu_hours"])
    if fmt == "csv":
        frame = result["combinations"]
        rest = result["rules"][~result["rules"]["rule"].isin(list(catalogue.SHARDED_STEPS))]
        frame = pd.concat([rest.drop(columns="stage"), frame], ignore_index=True)
        frame = frame[
            [
                "rule",
                "domain",
                "model",
                "jobs",
                "gpus_per_job",
                "cpus_per_job",
                "mem_gb_per_job",
                "hours_per_job",
                "items",
                "items_upper",
                "load_gpu_hours",
                "gpu_hours",
                "gpu_hours_upper",
                "bound_gpu_hours",
                "bound_ratio",
            ]
        ]
        total_row = {
            "rule": "total",
            "jobs": result["total_jobs"],
            "gpu_hours": result["total_gpu_hours"],
            "gpu_hours_upper": result["total_gpu_hours_upper"],
            "bound_gpu_hours": result["bound_gpu_hours"],
        }
        frame = pd.concat([frame, pd.DataFrame([total_row])], ignore_index=True)
        for column in ("gpu_hours", "gpu_hours_upper", "bound_gpu_hours"):
            frame[column] = frame[column].map(lambda h: "n/a" if pd.isna(h) else f"{h:.4f}")
        if missing:
            print(f"missing throughput entries: {', '.join(missing)}", file=sys.stderr)
        return frame.to_csv(index=False)
    lines = [
        f"# Plan for {configfile}",
        "",
        "## Jobs, what each asks for, and GPU-hours per rule",
        "",
        _markdown(result["rules"]),
        "",
        "## Jobs and GPU-hours per domain x model (sharded rules)",
        "",
        _markdown(result["combinations"]),
        "",
        "## GPU-hours per stage",
        "",
        _markdown(result["stages"]),
        "",
        f"Total: {result['total_jobs']} jobs, {total} GPU-hours, {result['load_gpu_hours']:.2f} of them loading "
        f"models ({_hours(result['total_gpu_hours_upper'])} at every candidate kept); the bound: "
        f"{_hours(result['bound_gpu_hours'])} GPU-hours",
    ]
    if missing:
        lines.append(
            f"(the known part is {result['known_gpu_hours']:.2f} GPU-hours; missing throughput entries: "
            f"{', '.join(missing)} — add them under `throughput:` in the config)"
        )
    lines += [
        "",
        "GPU-hours = (loading + items x seconds per item (`throughput:`)) x GPUs per job / 3600; loading "
        "(`load_gpu_hours`) is each model's weights read at `job_resources.load_gb_per_second` and its engine "
        "started (`engine_start_seconds`), in every job that loads it. " + plan.ITEMS_NOTE,
        "",
        physical_bound.NOTE,
        "",
        "Per job: GPUs, CPUs, memory (GB) and time (hours) of its first attempt, from what it loads "
        "(`job_resources` and the models' `weights_gb`); a retry asks for twice, then three times, the memory "
        "and time. Local rules run on the submit host.",
        "",
        *render_bill(result["bill"]),
        *render_counts(result),
    ]
    return "\n".join(lines) + "\n"


def render_throughput(measured: pd.DataFrame, benchmark_dir: str) -> str:
    counts = measured["items_from"].value_counts()
    header = [
        f"# Measured from {len(measured)} benchmark files in {benchmark_dir}: median over jobs of wall seconds",
        "# (Snakemake's `s`, model loading included) / items. Items: what the job's model worked on (its",
        f"# counters) for {counts.get('counters', 0)} jobs, rows of its output parquet for {counts.get('output', 0)}, "
        f"the plan's upper bound (no output",
        f"# found) for {counts.get('plan', 0)}; {int((measured['items'] == 0).sum())} jobs had no items of their own "
        "(an empty shard, or all done before): left out.",
    ]
    unread = measured["benchmark"][measured["seconds"].isna()]
    if len(unread):
        header.append(
            f"# {len(unread)} benchmark files had no seconds (empty, or a header only): left out, e.g. "
            f"{unread.iloc[0]}."
        )
    table = plan.throughput_table(measured)
    body = (
        yaml.safe_dump({"throughput": table}, sort_keys=False, default_flow_style=False)
        if table
        else "throughput: {}\n"
    )
    return "\n".join(header) + "\n" + body


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="blindspot", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument("--configfile", required=True, help="the run's config, e.g. config/config.yaml")
        return sub

    sub = command("plan", "jobs per rule and per domain x model, and GPU-hours per stage")
    sub.add_argument("--format", choices=("md", "csv"), default="md")
    sub = command("throughput", "measured seconds per item from a finished run, as a `throughput:` block")
    sub.add_argument("benchmark_dir", metavar="BENCHMARK_DIR", help="the run's {results_dir}/benchmarks")
    sub = command("targets", "output paths of the sharded jobs that match, one per line, for `snakemake`")
    sub.add_argument("--domain", action="append", default=[], help="repeatable; default every domain")
    sub.add_argument("--model", action="append", default=[], help="repeatable; a job matches if it uses the model")
    sub.add_argument("--rule", action="append", default=[], help="repeatable; default every sharded rule")
    sub = command(
        "fetch-models",
        "download the files of every hub model the config uses into the Hugging Face "
        "cache (HF_HOME), on a machine with internet; resumes, skips what is cached",
    )
    sub.add_argument("--dry-run", action="store_true", help="list what would be fetched, without the network")
    sub = command("doctor", "preflight checks before a run; one verdict per line, exit 1 if any FAILs")
    sub.add_argument(
        "--profile",
        help="the Snakemake profile the run will use, e.g. profiles/slurm: checks its "
        "envvars and conda, and on SLURM sends one canary job per GPU count",
    )
    sub.add_argument("--canary-timeout", type=float, default=600, help="seconds to wait for the canary jobs")
    command(
        "verify",
        "check every rendered image against the sha256 recorded when it was written; exit 1 and print "
        "the command that re-runs their jobs if any is missing or changed",
    )
    evaluate_cli.add_parser(commands)
    annotate = commands.add_parser("annotate", help="human annotation: make a project, serve it, export labels")
    actions = annotate.add_subparsers(dest="action", required=True)
    make = actions.add_parser("make", help="a project folder: Label Studio tasks and config, and annotator links")
    make.add_argument("--task", required=True, choices=TASKS)
    make.add_argument(
        "--items",
        required=True,
        help="the subset's parquet table (filter_validation, preference_pairs, or a HumbleBench questions table)",
    )
    make.add_argument("--annotators", required=True, help="comma-separated names")
    make.add_argument("--out", required=True, help="the project folder")
    make.add_argument(
        "--image-root",
        help="Label Studio image paths are relative to this folder (its "
        "LOCAL_FILES_DOCUMENT_ROOT), which must be above the deepest folder holding every image "
        "(Label Studio's storage); default: that folder's parent",
    )
    make.add_argument("--image-url-prefix", default="/data/local-files/?d=", help="Label Studio's local-file URL")
    make.add_argument(
        "--judge-template",
        help="image_score: the VLM filter's prompt template, whose rubric the "
        f"evaluators are shown; default: image_stage.judge_template of the checkout's {CHECKOUT_CONFIG}",
    )
    serve = actions.add_parser("serve", help="the built-in annotation page; prints one link per annotator")
    serve.add_argument("project")
    serve.add_argument("--host", default="127.0.0.1", help="127.0.0.1 by default: reachable from this machine only")
    serve.add_argument("--port", type=_port, default=8765, help="0: any free port")
    email = {
        "action": "append",
        "default": [],
        "metavar": "NAME=EMAIL",
        "help": "an annotator's Label Studio user (repeatable); a name that is an email needs none",
    }
    export = actions.add_parser(
        "export", help="the built-in page's labels as Label Studio tasks with annotations, importable into Label Studio"
    )
    export.add_argument("project")
    export.add_argument("out")
    export.add_argument("--email", **email)
    push = actions.add_parser(
        "push",
        help="make a Label Studio project from a project folder: label config, "
        "local-files storage, tasks (token in LABEL_STUDIO_API_KEY)",
    )
    push.add_argument("project")
    push.add_argument(
        "--url",
        default=os.environ.get("LABEL_STUDIO_URL", "http://127.0.0.1:8080"),
        help="the Label Studio server (default: LABEL_STUDIO_URL, or port 8080 here)",
    )
    push.add_argument("--title", help="the Label Studio project's title")
    pull = actions.add_parser(
        "pull",
        help="the pushed Label Studio project's labels, annotators named, checked "
        "against the label config (token in LABEL_STUDIO_API_KEY)",
    )
    pull.add_argument("project")
    pull.add_argument("out")
    pull.add_argument("--email", **email)
    pull.add_argument("--url", help="the Label Studio server, if not the one the push recorded")
    humble = commands.add_parser("humble", help="HumbleBench: score answers made elsewhere")
    humble_actions = humble.add_subparsers(dest="action", required=True)
    score = humble_actions.add_parser(
        "score",
        help="every metric, Tables 4-6 and the NOTA plot from the official "
        "code's predictions or a question_id,setting,model,answer CSV",
    )
    score.add_argument(
        "predictions",
        metavar="PREDICTIONS",
        help="the official results folder (<setting>/<Model>/<Model>.jsonl), one such .jsonl, or a .csv",
    )
    score.add_argument("--questions", required=True, help="the release, in any format the workflow reads")
    score.add_argument("--out", required=True, help="the folder to write tables/ into")
    score.add_argument(
        "--configfile",
        help=f"whose humblebench settings to use (default: the checkout's {CHECKOUT_CONFIG}, from any folder)",
    )
    score.add_argument("--setting", help="the setting of a lone .jsonl (official or config name); default: its path")
    score.add_argument(
        "--human-answers",
        help="people's answers for Table 7: a CSV annotator,question_id,setting,"
        "answer or the humble_answer project's labels (.json)",
    )
    score.add_argument(
        "--human-study",
        help="the annotators' question sets (human_study.parquet) that --human-answers' labels are checked against",
    )
    view = commands.add_parser(
        "view", help="a static site of a run's per-item records with their images, to open from file:// or serve"
    )
    view.add_argument("path", metavar="PATH", help="a results folder, or a records file (tables/*_records.jsonl)")
    view.add_argument("--out", help="the site's folder (default: blindspot_view beside the records)")
    view.add_argument("--serve", action="store_true", help="then serve it on 127.0.0.1 (for an SSH tunnel)")
    view.add_argument("--port", type=int, default=8000, help="with --serve (default 8000; 0: any free one)")
    return parser


def view(args: argparse.Namespace) -> None:
    from pathlib import Path

    from blindspot import view as site

    files = site.records_files(args.path)
    out = Path(args.out or files[0].parent / "blindspot_view")
    index = site.build_site(args.path, out)
    sys.stdout.write(f"blindspot view: file://{index.resolve()}\n")
    sys.stdout.flush()
    if args.serve:
        site.serve(out, args.port)


def humble(args: argparse.Namespace) -> None:
    from blindspot.annotation.labels import read_human_answers
    from blindspot.humblebench.external_answers import score
    from blindspot.reporting import to_markdown

    config = checkout_config(args.configfile, CHECKOUT_CONFIG)
    humans = read_human_answers(args.human_answers, args.human_study) if args.human_answers else None
    table, caption = score(
        args.predictions, args.questions, config["humblebench"], config["seed"], args.out, args.setting, humans
    )
    sys.stdout.write(f"{caption}\n\n{to_markdown(table)}")


def annotate(args: argparse.Namespace) -> None:
    from blindspot.annotation import label_studio
    from blindspot.annotation import server as annotation_server
    from blindspot.annotation.projects import make_project

    if args.action == "make":
        from blindspot.prompts import PromptTemplate

        rubric = None
        if args.task == "image_score":  # the rubric the VLM filter scores with, as the workflow's projects show
            template = args.judge_template
            if template is None:
                template = CHECKOUT / checkout_config(None, CHECKOUT_CONFIG)["image_stage"]["judge_template"]
            rubric = PromptTemplate.load(template).rubric
        project = make_project(
            args.task,
            pd.read_parquet(args.items),
            [a.strip() for a in args.annotators.split(",") if a.strip()],
            args.out,
            args.image_url_prefix,
            args.image_root,
            rubric,
        )
        sys.stdout.write(f"{args.out}: {len(project['items'])} items for {len(project['annotators'])} annotators\n")
    elif args.action == "serve":
        server = annotation_server.serve(args.project, args.host, args.port)
        for name, link in annotation_server.links(args.project, args.host, server.server_address[1]).items():
            sys.stdout.write(f"{name}: {link}\n")
        sys.stdout.flush()
        server.serve_forever()
    elif args.action == "export":
        count = label_studio.export_labels(args.project, args.out, label_studio.parse_emails(args.email))
        sys.stdout.write(f"{args.out}: {count} labels\n")
    elif args.action == "push":
        token = os.environ.get("LABEL_STUDIO_API_KEY", "")
        project_id = label_studio.push(args.project, args.url, token, args.title)
        sys.stdout.write(f"{args.project}: Label Studio project {project_id} at {args.url}\n")
    else:
        token = os.environ.get("LABEL_STUDIO_API_KEY", "")
        count = label_studio.pull(args.project, args.out, token, label_studio.parse_emails(args.email), args.url)
        sys.stdout.write(f"{args.out}: {count} labels\n")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "annotate":
            annotate(args)
            return 0
        if args.command == "humble":
            humble(args)
            return 0
        if args.command == "evaluate":
            evaluate_cli.main(args)
            return 0
        if args.command == "view":
            view(args)
            return 0
        config = load_config(args.configfile)
        if args.command == "plan":
            sys.stdout.write(render_plan(plan.plan(config), args.configfile, args.format))
        elif args.command == "fetch-models":
            return hub_fetch.fetch_models(config, dry_run=args.dry_run)
        elif args.command == "doctor":
            checks = doctor.run_checks(config, args.profile, canary_timeout_s=args.canary_timeout)
            sys.stdout.write(doctor_report.render(checks))
            return 1 if doctor_report.failed(checks) else 0
        elif args.command == "verify":
            checked, bad = verify.verify_images(config)
            sys.stdout.write(verify.report(args.configfile, config["results_dir"], checked, bad))
            return 1 if bad else 0
        elif args.command == "throughput":
            sys.stdout.write(
                render_throughput(plan.measured_throughput(config, args.benchmark_dir), args.benchmark_dir)
            )
        else:
            selected = plan.select_targets(config, args.domain, args.model, args.rule)
            sys.stdout.write("".join(f"{target}\n" for target in selected))
    except (ConfigError, ValueError, OSError, hub_fetch.HubError) as error:
        parser.exit(2, f"{parser.prog}: error: {one_line(error)}\n")  # the line alone: the usage is not the fault
    return 0


if __name__ == "__main__":
    sys.exit(main())
