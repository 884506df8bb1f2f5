#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py says what it measures; docs/development.md how to read it).
#   bench/gpu_check.sh --prepare   here, once: the wheels the GPU machine lacks into .whl/ (diffusers and
#                                  what blindspot needs beside its torch, transformers and peft), and the
#                                  tiny preset's VLMs, whose processors it uses, into bench/.gpu_assets/
#   bench/gpu_check.sh             on the GPU machine (carry .whl and the two bench/.gpu_assets/models/
#                                  folders): at most 8 minutes; the JSON goes to $OUT (or bench/out)
#   bench/gpu_check.sh --dry       anywhere: every model built on the meta device, and what would be measured
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
out="${OUT:-bench/out}/gpu_check.json"
case "${1:-}" in
  --prepare)
    here=.venv/bin/python
    # The versions this project's env has, as wheels for the GPU machine's Python 3.12 on x86-64.
    for package in diffusers importlib_metadata jsonschema jsonschema-specifications referencing rpds-py; do
      version=$("$here" -c "import importlib.metadata as m; print(m.version('$package'))")
      "$here" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "$package==$version"
    done
    PYTHONPATH=src:bench "$here" -c "
from tiny_preset import build_models, tiny_config
build_models(tiny_config('bench/.gpu_assets'), {'tiny-qwen2.5-vl', 'tiny-qwen3-vl'})"
    du -sh .whl bench/.gpu_assets/models/tiny-qwen2.5-vl bench/.gpu_assets/models/tiny-qwen3-vl
    exit 0 ;;
  --dry)
    PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} exec "$PYTHON" bench/gpu_check.py --dry --out "$out" ;;
esac
if [ -d .whl ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 480 "$PYTHON" bench/gpu_check.py --out "$out" "$@"
