"""The arms of bench/peers/textgen.py and bench/peers/answering.py, run in .venv-vllm: load the job's model
through the project's loader (with the backend its spec names) on the job's thread count, time its `arm` on the
job's conversations, and print {"seconds", "load_seconds", "outputs"} as the last line of stdout.

- "textgen": `load_text_generator`, then `generate_json` under the job's JSON schema;
- "answers": `load_vlm_scorer`, then HumbleBench-style answers (no images), `per_call` questions a call (all in
  one call when 0): each answer's letter probabilities, text and whether it ended on its own.

Run: .venv-vllm/bin/python bench/peers/vllm_arms.py JOB.json   (JOB.json as those comparisons write it)
"""

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# vLLM logs to stdout by default; stdout carries only the result line.
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import timed

from blindspot.models.spec import ModelSpec


def textgen(job: dict[str, Any]) -> Callable[[], list]:
    from blindspot.models.textgen import load_text_generator

    generator = load_text_generator(ModelSpec(**job["model"]), seed=job["seed"], batch_size=job["batch_size"])
    return lambda: generator.generate_json(job["conversations"], job["json_schema"])


def answers(job: dict[str, Any]) -> Callable[[], list]:
    from blindspot.humblebench.answers import option_token_ids
    from blindspot.models.vlm_scoring import load_vlm_scorer

    conversations = job["conversations"]
    per_call = job["per_call"] or len(conversations)
    scorer = load_vlm_scorer(ModelSpec(**job["model"]), batch_size=per_call)
    letters = option_token_ids(scorer.tokenizer)

    def answer() -> list:
        return [
            result
            for start in range(0, len(conversations), per_call)
            for result in scorer.choose(
                conversations[start : start + per_call], [None] * per_call, letters, job["max_new_tokens"]
            )
        ]

    return answer


ARMS = {"textgen": textgen, "answers": answers}


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    # As a workflow job runs (Snakemake sets OMP_NUM_THREADS to its threads); torch is not imported yet.
    os.environ["OMP_NUM_THREADS"] = str(job["threads"])
    started = time.perf_counter()
    arm = ARMS[job["arm"]](job)
    load_seconds = time.perf_counter() - started
    seconds, outputs = timed(arm, job["repeats"])
    print(json.dumps({"seconds": seconds, "load_seconds": load_seconds, "outputs": outputs}), flush=True)


if __name__ == "__main__":
    main()
