"""Reading config files: YAML that names its file and line when it is broken, and checks against a
JSON schema whose message names the offending key. What a config means is checked in `blindspot.checks`."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from blindspot.paths import SCHEMA_DIR

SCHEMA_PATH = SCHEMA_DIR / "config.schema.yaml"


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the offending key."""


def one_line(error: Exception) -> str:
    """An error as the one line a command stops with: an OS error names its file and says what is wrong
    with it."""
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename2 or error.filename}: {error.strerror or error}"  # a rename: its target
    if isinstance(error, FileNotFoundError) and len(error.args) == 1:  # pyarrow's: the path alone
        return f"{error}: no such file"
    return str(error)


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties":
        # The offending key is not in the path; jsonschema only names it in the message.
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        parts.extend(extra[:1])
    elif error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        parts.extend(missing[:1])
    return ".".join(parts) or "<top level>"


# "integer" is a Python int: jsonschema also takes 8.0 (and the steps then fail on it), never a bool.
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, instance: isinstance(instance, int) and not isinstance(instance, bool)
    ),
)
# A number in exponent notation. PyYAML reads a float only with a dot and a signed exponent (1.0e-3,
# 1.0e+3): 1e-3 and 1.0e3 are text.
_EXPONENT = re.compile(r"([-+]?)([0-9]*)(?:\.([0-9]*))?([eE])([-+]?)([0-9]+)")


def _number_as_text(error: jsonschema.ValidationError) -> str:
    """For a number YAML read as text (1e-3), how to write it so YAML reads a number; else empty."""
    value = error.instance
    if error.validator != "type" or not isinstance(value, str):
        return ""
    wanted = [error.validator_value] if isinstance(error.validator_value, str) else list(error.validator_value)
    if not {"number", "integer"} & set(wanted):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    exponent = _EXPONENT.fullmatch(value.strip())
    if "number" not in wanted:  # an integer only
        if not number.is_integer():
            return ""
        written = str(int(number)) if exponent else f"{int(number)} without quotes"
    elif exponent:
        sign, whole, fraction, e, exponent_sign, digits = exponent.groups()
        written = f"{sign}{whole or '0'}.{fraction or '0'}{e}{exponent_sign or '+'}{digits}"
    elif math.isnan(number):
        written = ".nan"
    elif math.isinf(number):
        written = "-.inf" if number < 0 else ".inf"
    else:
        written = f"{value.strip()} without quotes"
    return f"; YAML reads {value} as text: write {written}"


def check_schema(instance: Any, schema_path: Path, what: str) -> None:
    """Raise ConfigError naming the key of the shallowest schema violation in `instance`."""
    schema = yaml.safe_load(schema_path.read_text())
    errors = list(_Validator(schema).iter_errors(instance))
    if errors:
        error = min(errors, key=lambda e: (len(list(e.absolute_path)), list(map(str, e.absolute_path))))
        raise ConfigError(f"{what} key '{_key_path(error)}': {error.message}{_number_as_text(error)}")


def named_keys(config: Any, pattern: str) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(the keys down to it, value) of every key of the config that `pattern` ("a.*.b") names and that is set;
    a name that `*` stands for may hold dots (a model's, `qwen2.5-vl`)."""
    head, _, rest = pattern.partition(".")
    if not isinstance(config, dict):
        return
    names = list(config) if head == "*" else [head] if config.get(head) is not None else []
    for name in names:
        if rest:
            yield from (((name, *keys), value) for keys, value in named_keys(config[name], rest))
        else:
            yield (name,), config[name]


def named_values(config: Any, pattern: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every key of the config that `pattern` ("a.*.b") names and that is set."""
    yield from ((".".join(keys), value) for keys, value in named_keys(config, pattern))


def _duplicate_key(root: yaml.Node) -> tuple[str, int, int] | None:
    """The first key given twice in one mapping of a YAML document (PyYAML keeps the last without a
    word): its dotted path and both lines. A merge (`<<: *anchor`) may override, so it is no duplicate."""
    pending: list[tuple[yaml.Node, str]] = [(root, "")]
    seen_nodes: set[int] = set()
    while pending:
        node, prefix = pending.pop()
        if id(node) in seen_nodes:  # an alias points back at a node already walked
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            pending += [(item, f"{prefix}[{index}]") for index, item in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key, value in node.value:
                name = f"{prefix}.{key.value}" if prefix else str(key.value)
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if name in lines:
                        return name, lines[name], key.start_mark.line + 1
                    lines[name] = key.start_mark.line + 1
                pending.append((value, name))
    return None


def read_yaml(path: str | Path, what: str = "config") -> Any:
    """A YAML file's data; a file that is missing, unreadable, not YAML or that gives a key twice raises
    ConfigError with one line naming the file and the line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{what} file {path} cannot be read: {error}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        duplicate = _duplicate_key(root) if root is not None else None
        if duplicate:
            key, first, again = duplicate
            raise ConfigError(f"{what} file {path} line {again}: key '{key}' is given twice (first on line {first})")
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(part) for part in (error.context, error.problem) if part)
        raise ConfigError(f"{what} file {path}{where}: not valid YAML ({problem})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{what} file {path}: not valid YAML ({' '.join(str(error).split())})") from None


def check_config_files(paths: Iterable[str | Path]) -> None:
    """Re-read the config files a Snakemake run loaded (`workflow.configfiles`): Snakemake's own loader
    keeps the last of a duplicated key without a word."""
    for path in paths:
        read_yaml(path)


def as_list(value: str | list[str]) -> list[str]:
    """A config value that is one name or a list of them, as a list."""
    return [value] if isinstance(value, str) else list(value)


def config_value(config: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted config key (e.g. "image_stage.judge_batch_size"); None where a part of it
    is not set."""
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, Mapping) or value.get(part) is None:
            return None
        value = value[part]
    return value
