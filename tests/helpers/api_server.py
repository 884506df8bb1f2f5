"""A real OpenAI-compatible server on 127.0.0.1 for the API clients' tests: `transformers serve`
(FastAPI + uvicorn, OpenAI chat completions with images) pinned to one model, on the CPU."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir: str, port: int, log_path: Path) -> subprocess.Popen:
    """`transformers serve` (FastAPI + uvicorn, OpenAI chat completions) pinned to one model."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    command = [str(Path(sys.executable).parent / "transformers"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with log_path.open("w") as log:
        return subprocess.Popen(
            [*command, "--device", "cpu", model_dir], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=log_path.parent
        )


def wait_ready(process: subprocess.Popen, port: int, log_path: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"transformers serve exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.5)
    pytest.fail(f"transformers serve not ready after {timeout_s} s:\n{log_path.read_text()[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def served_posts(log_path: Path) -> int:
    """Chat-completion requests the server received, from its access log."""
    return log_path.read_text().count('"POST /v1/chat/completions')


@contextlib.contextmanager
def serving(model_dir: str, folder: Path) -> Iterator[dict]:
    """The server of `model_dir` while the block runs: its port, access log (`folder`/serve.log) and model."""
    log_path = folder / "serve.log"
    port = free_port()
    process = start_server(model_dir, port, log_path)
    try:
        wait_ready(process, port, log_path)
        yield {"port": port, "log": log_path, "model": model_dir}
    finally:
        stop(process)


KEY_ENV = "BLINDSPOT_TEST_VLM_KEY"


KEY = "sk-blindspot-vlm-5ca1ab1e-NEVER-LEAK"


def _letter_bias(model_dir: str) -> dict[str, float]:
    """logit_bias towards "A".."E": the random-weight model then writes a letter (noise, but real)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return {str(tokenizer.encode(c, add_special_tokens=False)[0]): 30.0 for c in "ABCDE"}
