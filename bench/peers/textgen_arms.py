"""One arm of bench/peers/textgen.py, run in .venv-vllm: load the job's model with the backend its spec
names, on the job's thread count, through the project's `load_text_generator`; time `generate_json` on
the job's conversations, and print {"seconds", "load_seconds", "texts"} as the last line of stdout.

Run: .venv-vllm/bin/python bench/peers/textgen_arms.py JOB.json   (JOB.json as bench/peers/textgen.py writes it)
"""

import json
import os
import sys
import time
from pathlib import Path

# vLLM logs to stdout by default; stdout carries only the result line.
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import timed

from blindspot.models.spec import ModelSpec
from blindspot.models.textgen import load_text_generator


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    # As a workflow job runs (Snakemake sets OMP_NUM_THREADS to its threads); torch is not imported yet.
    os.environ["OMP_NUM_THREADS"] = str(job["threads"])
    started = time.perf_counter()
    generator = load_text_generator(ModelSpec(**job["model"]), seed=job["seed"], batch_size=job["batch_size"])
    load_seconds = time.perf_counter() - started
    seconds, texts = timed(lambda: generator.generate_json(job["conversations"], job["json_schema"]), job["repeats"])
    print(json.dumps({"seconds": seconds, "load_seconds": load_seconds, "texts": texts}), flush=True)


if __name__ == "__main__":
    main()
