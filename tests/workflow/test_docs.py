"""The docs a newcomer reads: generated pages up to date, the rule table equal to the workflow's
rules, every config key documented, and no relative link that points nowhere."""

import argparse
import contextlib
import importlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from helpers.workflow import REPO, snakemake

from blindspot import cli, docs
from blindspot.targets import PATHS

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_generated_pages_are_up_to_date():
    assert docs.stale_pages() == [], "run `python -m blindspot.docs`"


def test_check_mode_names_a_stale_page_and_exits_1(tmp_path, capsys):
    docs.main(["--docs-dir", str(tmp_path)])
    assert docs.stale_pages(tmp_path) == []
    (tmp_path / "config.md").write_text((tmp_path / "config.md").read_text().replace("`seed`", "`sead`"))
    with pytest.raises(SystemExit) as exited:
        docs.main(["--check", "--docs-dir", str(tmp_path)])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'config.md'} is out of date" in err
    assert "outputs.md" not in err


def test_every_output_kind_and_placeholder_has_a_description():
    assert set(docs.OUTPUT_DESCRIPTIONS) == set(PATHS)
    used = {name for pattern in PATHS.values() for name in docs.placeholders(pattern)}
    assert used <= set(docs.PLACEHOLDERS)


def _rule_table(page: Path) -> set[str]:
    section = page.read_text().split("\n## The rules\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", section, flags=re.M))


@pytest.mark.integration
def test_rule_lists_equal_the_workflows_rules():
    # one rule a line, a rule with a docstring followed by it in parentheses
    rules = set(re.findall(r"^(\w+)(?: \(.*\))?$", snakemake("--list-rules"), flags=re.M))
    assert "render_images" in rules
    assert _rule_table(REPO / "docs" / "usage.md") == rules
    # the README's overview of the stages names every rule too (`all` aside)
    overview = (REPO / "README.md").read_text().split("## What the workflow does", 1)[1].split("```")[1]
    assert set(re.findall(r"\b[a-z0-9]+(?:_[a-z0-9]+)+\b", overview)) == rules - {"all"}


def _schema_property_names(node) -> set[str]:
    """Every property name anywhere in the schema, found without the docs' own walk."""
    found = set()
    if isinstance(node, dict):
        found |= set(node.get("properties", {}))
        for value in node.values():
            found |= _schema_property_names(value)
    elif isinstance(node, list):
        for value in node:
            found |= _schema_property_names(value)
    return found


def test_every_schema_key_is_on_the_config_page():
    page = (REPO / "docs" / "config.md").read_text()
    documented = {key.rsplit(".", 1)[-1] for key in re.findall(r"^\| `([\w.<>-]+)` \|", page, flags=re.M)}
    missing = _schema_property_names(docs.load_schema()) - documented
    assert not missing, f"config keys missing from docs/config.md: {sorted(missing)}"


def test_config_page_shows_defaults_map_keys_and_refs():
    keys = {key.key: key for key in docs.config_keys(docs.load_schema())}
    assert keys["allow_cpu"].default == "false"
    assert keys["domains.<name>.n_seeds"].required
    assert keys["models.<name>.generation.max_tokens"].default == "256"  # through $defs/model
    assert keys["prompt_stage.generators"].type == "list of string"  # through $defs/model_names
    assert keys["evaluation.families"].type == "map of string"


def _stray_keys(node, path=""):
    """Keys with no value: what YAML makes of an unquoted comma inside a flow mapping's text."""
    if isinstance(node, dict):
        for key, value in node.items():
            if value is None and key != "default":
                yield f"{path}/{key}"
            yield from _stray_keys(value, f"{path}/{key}")
    elif isinstance(node, list):
        for value in node:
            yield from _stray_keys(value, path)


def test_schema_descriptions_are_whole():
    assert list(_stray_keys(docs.load_schema())) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_relative_links_point_to_files(page):
    links = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    relative = [link.split("#")[0] for link in links if not re.match(r"^(\w+:|#)", link)]
    broken = [link for link in relative if not (page.parent / link).exists()]
    assert not broken, f"{page.name}: broken links {broken}"


def _ledger_rows() -> dict[str, str]:
    """The fidelity ledger's rows: id -> its config-key cell."""
    rows = re.findall(r"^\| ([PH]\d+) \|.*\| ([^|]*) \|$", (REPO / "docs" / "fidelity.md").read_text(), flags=re.M)
    return dict(rows)


def test_every_ledger_row_with_a_config_key_is_pointed_to_from_the_config_and_back():
    rows = _ledger_rows()
    assert len(rows) >= 10
    configs = [REPO / "config" / "config.yaml", *sorted((REPO / "config" / "taxonomy").glob("*.yaml"))]
    pointers = {match for path in configs for match in re.findall(r"docs/fidelity\.md ([PH]\d+)", path.read_text())}
    with_a_key = {row for row, key in rows.items() if not key.strip().startswith("(")}
    assert with_a_key - pointers == set(), "rows whose config key has no comment naming them"
    assert pointers - set(rows) == set(), "config comments naming no row of docs/fidelity.md"


# The command lines the docs show: each must be one its program takes. Commands are read from code
# blocks (shell blocks: ```bash, ```sh, ```console or no language) and from `code spans` in the prose;
# a command is `blindspot ...`, `snakemake ...` (either may start with .venv/bin/) or
# `python -m blindspot.<module> ...`. Lines continued with a backslash are joined, `# comments` dropped,
# `a && b` and `a; b` are two commands, and `$(...)` is a command of its own whose output stands in its
# place (the word SUBSTITUTION). Square brackets mark an optional part: the check includes every one.

# The docs' placeholder words, and what the check puts in their place: values their parsers accept.
PLACEHOLDERS = {
    "STEP": "render_images",  # design.md: `python -m blindspot.steps run STEP --configfile ... NAME=VALUE`
    "...": "config/config.yaml",  # the same command's elided config
}
# `python -m MODULE` commands other than `blindspot.cli` (`blindspot` itself), checked whole even in prose:
# the functions the module's main calls first once it has accepted its arguments. The check stops it
# there, so nothing runs.
MODULE_STOPS = {"blindspot.steps": ("setup_logging",), "blindspot.docs": ("stale_pages", "write_text")}
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
SUBSTITUTION = "$(...)"
PROGRAM_START = re.compile(r"^(\.venv/bin/)?(blindspot|snakemake|python3? -m (blindspot|snakemake)\b)")


@dataclass(frozen=True)
class DocumentedCommand:
    """One command line of a page: the program that reads it and the arguments it is given."""

    page: str  # relative to the checkout, e.g. docs/usage.md
    line: int  # where the command starts
    text: str  # as written (continuations joined)
    program: str  # "blindspot", "snakemake", or a module of MODULE_STOPS (`python -m` it)
    args: tuple[str, ...]  # placeholders replaced; SUBSTITUTION for the output of each of `inner`, in order
    in_prose: bool  # a `code span`: it may name a command without its required arguments
    inner: tuple["DocumentedCommand", ...] = ()  # the `$(...)` commands whose output it takes

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: `{self.text}`"


def _program(words: list[str]) -> tuple[str, list[str]] | None:
    """The program a command's words run and its arguments; None for a program the docs' check ignores."""
    first = words[0].removeprefix(".venv/bin/")
    if first in ("blindspot", "snakemake"):
        return first, words[1:]
    if first in ("python", "python3") and words[1:2] == ["-m"] and len(words) > 2:
        module = {"blindspot.cli": "blindspot"}.get(words[2], words[2])
        if module == "snakemake" or module.startswith("blindspot"):
            return module, words[3:]
    return None


def _argument(word: str) -> str:
    word = word.removeprefix("[").removesuffix("]")  # an optional part, checked as given
    return PLACEHOLDERS.get(word, word)


def shell_commands(text: str, page: str, line: int, in_prose: bool) -> list[DocumentedCommand]:
    """The commands of one shell line that run a program the check knows, each `$(...)` before the
    command that takes its output."""
    inner_texts = iter(re.findall(r"\$\(([^()]*)\)", text))
    lexer = shlex.shlex(re.sub(r"\$\([^()]*\)", f" {SUBSTITUTION} ", text), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as error:  # unbalanced quotes
        return [DocumentedCommand(page, line, text.strip(), "shell", (str(error),), in_prose)]
    segments: list[list[str]] = [[]]  # the simple commands: words between `;`, `&&`, `||` and `|`
    for token in tokens:
        if set(token) <= set(";&|"):
            segments.append([])
        else:
            segments[-1].append(token)
    commands = []
    for words in filter(None, segments):
        inner = []
        for word in words:
            if word == SUBSTITUTION:
                inner += shell_commands(next(inner_texts), page, line, in_prose)
        commands += inner
        found = _program(words)
        if found is None or (in_prose and found[0] in ("blindspot", "snakemake") and not found[1]):
            continue  # another program, or the program's name alone in prose
        program, args = found
        arguments = tuple(map(_argument, args))
        commands.append(DocumentedCommand(page, line, " ".join(words), program, arguments, in_prose, tuple(inner)))
    return commands


def documented_commands(page: Path) -> list[DocumentedCommand]:
    """Every command of a page, from its shell blocks and its code spans, in the order they appear."""
    name = page.relative_to(REPO).as_posix() if page.is_relative_to(REPO) else page.name
    lines = page.read_text().splitlines()
    commands, prose = [], []
    block = None  # the open block's language
    pending, start = "", 0  # a line continued with a backslash, and where it started
    for number, line in enumerate(lines, 1):
        fence = re.match(r"^\s*```\s*(\w*)", line)
        prose.append("" if fence or block is not None else line)
        if fence:
            block = fence.group(1) if block is None else None
            continue
        if block not in SHELL_BLOCKS:
            continue
        if not pending:
            start = number
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if re.search(r"\b(blindspot|snakemake)\b", pending):  # other lines may not even split as shell words
            commands += shell_commands(pending, name, start, in_prose=False)
        pending = ""
    text = "\n".join(prose)
    for span in re.finditer(r"`([^`]+)`", text):
        words = " ".join(span.group(1).split())  # a span may wrap onto the next line
        if "\n\n" not in span.group(1) and PROGRAM_START.match(words):
            commands += shell_commands(words, name, text.count("\n", 0, span.start()) + 1, in_prose=True)
    return sorted(commands, key=lambda command: command.line)


COMMANDS = [command for page in PAGES for command in documented_commands(page)]


def _exit_message(parse) -> str | None:
    """What a parser said when it refused the arguments (it exits), or None when it took them."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parse()
    except SystemExit as exited:
        if exited.code:
            return stderr.getvalue().strip().splitlines()[-1] if stderr.getvalue().strip() else str(exited.code)
    return None


def _option_values(args: tuple[str, ...], options: dict[str, bool]):
    """(option, value) for each value given to an option of `options` (option -> whether it takes several
    values, as Snakemake's --configfile does), before any `--`."""
    for index, word in enumerate(args):
        if word == "--":
            return
        name, equals, value = word.partition("=")
        if name in options and equals:
            yield name, value
        elif word in options:
            for value in args[index + 1 : None if options[word] else index + 2]:
                if value.startswith("-"):
                    break
                yield word, value


def _path_errors(args: tuple[str, ...], several_configfiles: bool = False) -> list[str]:
    """A config file that is not there, or a profile that is not a folder of profiles/."""
    errors = []
    for option, value in _option_values(args, {"--configfile": several_configfiles, "--profile": False}):
        if option == "--configfile" and not (REPO / value).is_file():
            errors.append(f"--configfile {value}: no such file")
        if option == "--profile" and not ((REPO / value).is_dir() and (REPO / value).parent == REPO / "profiles"):
            errors.append(f"--profile {value}: not a folder of profiles/")
    return errors


def blindspot_parser(*, whole: bool) -> argparse.ArgumentParser:
    """`blindspot`'s own parser (`cli.build_parser`, what the installed command runs), refusing an
    abbreviated option (the docs spell them out); with whole=False, as for a command named in prose
    (`blindspot plan`), its required arguments may be left out."""
    parser = cli.build_parser()
    parsers = [parser]
    while parsers:
        current = parsers.pop()
        current.allow_abbrev = False
        for action in current._actions:
            action.required = action.required and whole
            if isinstance(action, argparse._SubParsersAction):
                parsers += action.choices.values()
    return parser


def _module_error(module_name: str, args: tuple[str, ...]) -> str | None:
    """`python -m MODULE args` run up to where its main has accepted its arguments, and no further."""

    class Accepted(Exception):
        pass

    def stop(*_args, **_kwargs):
        raise Accepted

    module = importlib.import_module(module_name)
    # a package runs its __main__ module's main, which calls the package's functions
    runs = importlib.import_module(f"{module_name}.__main__") if hasattr(module, "__path__") else module
    with contextlib.ExitStack() as patches:
        for name in MODULE_STOPS[module_name]:
            patches.enter_context(mock.patch.object(module, name, stop))
        try:
            error = _exit_message(lambda: runs.main(list(args)))
        except Accepted:
            return None
    return error or f"{module_name}.main went past its arguments without calling any of {MODULE_STOPS[module_name]}"


def _snakemake_errors(command: DocumentedCommand) -> list[str]:
    """Options Snakemake does not know; and for a whole command (in a code block), what Snakemake's own
    parser says of it, with its profiles read as Snakemake reads them (their keys are options too)."""
    from snakemake.cli import get_argument_parser

    options = command.args[: command.args.index("--")] if "--" in command.args else command.args
    known = get_argument_parser()._option_string_actions
    option_words = [word.split("=", 1)[0] if word.startswith("--") else word[:2] for word in options if word[0] == "-"]
    errors = [f"{word}: not an option of snakemake" for word in option_words if word not in known]
    errors += _path_errors(options, several_configfiles=True)
    if command.in_prose or errors:
        return errors
    # Snakemake parses what precedes `--` and appends the targets after it (snakemake.cli.parse_args),
    # once without its profiles and again with them, whose keys it reads as options
    profiles = [str(REPO / value) for _, value in _option_values(options, {"--profile": False})]
    for parser in [get_argument_parser()] + ([get_argument_parser(profiles=profiles)] if profiles else []):
        parser.prog = "snakemake"
        error = _exit_message(lambda parser=parser: parser.parse_args(list(options)))
        if error:
            return [error]
    return []


def command_errors(command: DocumentedCommand) -> list[str]:
    """Why the command's program would refuse it: empty when its parser takes it."""
    if command.program == "shell":
        return [f"not a shell command line: {command.args[0]}"]
    if command.program == "snakemake":
        return _snakemake_errors(command)
    errors = _path_errors(command.args)
    if command.program == "blindspot":
        parser = blindspot_parser(whole=not command.in_prose)
        error = _exit_message(lambda: parser.parse_args(list(command.args)))
    elif command.program in MODULE_STOPS:
        error = _module_error(command.program, command.args)
    else:
        error = f"python -m {command.program}: a module the docs' check does not know (add it to MODULE_STOPS)"
    return errors + ([error] if error else [])


def test_the_docs_show_commands_of_every_program():
    """The extraction finds the commands the pages are known to show, so an empty list cannot pass
    the parse checks below by checking nothing."""
    assert {command.program for command in COMMANDS} == {"blindspot", "snakemake", *MODULE_STOPS}
    assert {"README.md", "docs/usage.md", "docs/annotation.md", "docs/development.md"} <= {
        command.page for command in COMMANDS if not command.in_prose
    }
    inner = [command for command in COMMANDS if command.inner]
    assert inner, "the partial re-runs take their targets from `$(blindspot targets ...)`"
    assert {command.inner[0].args[0] for command in inner} == {"targets"}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: f"{command.page}:{command.line}")
def test_documented_command_is_one_its_program_takes(command):
    """A command the README or docs/ show parses with its program's own parser, and the config files
    and profiles it names exist: a renamed option or subcommand, or a moved file, fails here naming
    the page and the line rather than in a reader's shell."""
    errors = command_errors(command)
    assert not errors, f"{command}: {'; '.join(errors)}"


def test_the_check_refuses_what_the_parsers_refuse(tmp_path):
    """The check itself: it reads blocks, continuations, comments, `&&`, `$(...)`, output and wrapped
    prose the way the pages use them, and each kind of stale command fails it while the current forms
    pass; a command named in prose may leave out its required arguments, one in a block may not."""
    page = tmp_path / "page.md"
    page.write_text(
        "Run `blindspot plan`, not `blindspot plam --configfile config/config.yaml`.\n"
        "```bash\n"
        "# blindspot plan --fromat csv    (a comment)\n"
        "./setup.sh && blindspot plan --configfile config/config.yaml \\\n"
        "    --format csv   # Markdown otherwise\n"
        "blindspot plan --configfile config/config.yaml --fromat csv\n"
        "blindspot plan --configfile config/config.yam\n"
        "blindspot targets --domain animals\n"
        "blindspot plan --config config/config.yaml\n"
        "snakemake --configfile config/config.yaml --profile profiles/slurm --forcerun render_images -- \\\n"
        "    $(blindspot targets --configfile config/config.yaml --rule render_images)\n"
        "snakemake --configfile config/config.yaml --profiles profiles/slurm\n"
        "snakemake --configfile config/config.yaml --profile profiles/cluster\n"
        "snakemake --configfile config/config.yaml --quiet rulez\n"
        "python -m blindspot.steps run render_images --configfile config/tiny.yaml domain=animals shard=00000\n"
        "python -m blindspot.steps run render_images --configfile config/tiny.yaml animals\n"
        "python -m blindspot.docs --chek\n"
        "```\n"
        "```\n"
        "blindspot: error: output, not a command\n"
        "```\n"
        "Dry-run it (`snakemake -n\n"
        "--forcerall`).\n"
    )
    found = [(command.line, command.text, command_errors(command)) for command in documented_commands(page)]
    assert found == [
        (1, "blindspot plan", []),
        (
            1,
            "blindspot plam --configfile config/config.yaml",
            [
                "blindspot: error: argument command: invalid choice: 'plam' (choose from 'plan', 'throughput', "
                "'targets', 'fetch-models', 'doctor', 'verify', 'evaluate', 'annotate', 'humble', 'view')"
            ],
        ),
        (4, "blindspot plan --configfile config/config.yaml --format csv", []),
        (
            6,
            "blindspot plan --configfile config/config.yaml --fromat csv",
            ["blindspot: error: unrecognized arguments: --fromat csv"],
        ),
        (7, "blindspot plan --configfile config/config.yam", ["--configfile config/config.yam: no such file"]),
        (
            8,
            "blindspot targets --domain animals",
            ["blindspot targets: error: the following arguments are required: --configfile"],
        ),
        (
            9,
            "blindspot plan --config config/config.yaml",
            ["blindspot plan: error: the following arguments are required: --configfile"],
        ),
        (10, "blindspot targets --configfile config/config.yaml --rule render_images", []),
        (
            10,
            "snakemake --configfile config/config.yaml --profile profiles/slurm --forcerun render_images -- $(...)",
            [],
        ),
        (
            12,
            "snakemake --configfile config/config.yaml --profiles profiles/slurm",
            ["--profiles: not an option of snakemake"],
        ),
        (
            13,
            "snakemake --configfile config/config.yaml --profile profiles/cluster",
            ["--profile profiles/cluster: not a folder of profiles/"],
        ),
        (
            14,
            "snakemake --configfile config/config.yaml --quiet rulez",
            [
                "snakemake: error: argument --quiet/-q: invalid choice: 'rulez' (choose from 'all', 'host', "
                "'progress', 'reason', 'rules')"
            ],
        ),
        (
            15,
            "python -m blindspot.steps run render_images --configfile config/tiny.yaml domain=animals shard=00000",
            [],
        ),
        (
            16,
            "python -m blindspot.steps run render_images --configfile config/tiny.yaml animals",
            ["python -m blindspot.steps: error: unrecognized arguments: animals"],
        ),
        (17, "python -m blindspot.docs --chek", ["python -m blindspot.docs: error: unrecognized arguments: --chek"]),
        (22, "snakemake -n --forcerall", ["--forcerall: not an option of snakemake"]),
    ]


# usage.md's partial re-runs: one domain, one model, one stage (the snakemake commands with targets).
PARTIAL_RERUNS = [
    command
    for command in COMMANDS
    if command.page == "docs/usage.md" and command.program == "snakemake" and "--" in command.args
]


def _planned_jobs(dry_run: str) -> tuple[dict[str, int], set[str]]:
    """A dry run's job stats (rule -> jobs) and the outputs of its jobs."""
    assert "Job stats:" in dry_run, dry_run[-2000:]
    table = dry_run.split("Job stats:", 1)[1].strip().split("\n\n", 1)[0]
    jobs = {rule: int(count) for rule, count in re.findall(r"^(\w+)\s+(\d+)$", table, flags=re.M)}
    outputs = {path for line in re.findall(r"^\s+output: (.*)$", dry_run, flags=re.M) for path in line.split(", ")}
    return jobs, outputs


@pytest.mark.integration
@pytest.mark.parametrize("command", PARTIAL_RERUNS, ids=lambda command: f"{command.page}:{command.line}")
def test_documented_partial_reruns_plan_their_jobs(command, monkeypatch, capsys):
    """The partial re-runs in usage.md, dry-run on the paper config as written, with the targets their
    `$(blindspot targets ...)` prints (the CLI run in-process): each plans the jobs that write its
    targets, the forced rule's among them. The --profile is left out: profiles/slurm deploys conda
    envs, which Snakemake looks for even in a dry run (and this machine may have no conda), and a
    profile changes how the jobs run, not which."""
    assert len(PARTIAL_RERUNS) == 3
    monkeypatch.chdir(REPO)
    printed = []
    for inner in command.inner:
        assert inner.program == "blindspot"
        capsys.readouterr()
        assert cli.main(list(inner.args)) == 0
        printed.append(capsys.readouterr().out.split())
        assert printed[-1], f"{inner} printed no targets"
    args = list(command.args)
    if "--profile" in args:
        del args[args.index("--profile") : args.index("--profile") + 2]
    args = [word for arg in args for word in (printed.pop(0) if arg == SUBSTITUTION else [arg])]
    jobs, outputs = _planned_jobs(snakemake("-n", *args))
    targets = args[args.index("--") + 1 :]
    assert set(targets) <= outputs, f"{command}: no job planned for {sorted(set(targets) - outputs)[:3]}"
    forced = {value for _, value in _option_values(command.args, {"--forcerun": True})}
    assert forced <= set(jobs), f"{command}: forced rules {forced - set(jobs)} plan no job"
