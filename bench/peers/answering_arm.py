"""One arm of bench/peers/answering.py, run in .venv-vllm: load the job's model through the project's
`load_vlm_scorer` (vLLM's CPU build), then time HumbleBench-style answers to the job's questions (without
images), asked `per_call` at a time (the whole list when it is 0), and print {"seconds", "load_seconds",
"answers"} as the last line of stdout.

Run: .venv-vllm/bin/python bench/peers/answering_arm.py JOB.json   (JOB.json as bench/peers/answering.py writes it)
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

from blindspot.humblebench.answers import option_token_ids
from blindspot.models.spec import ModelSpec
from blindspot.models.vlm_scoring import load_vlm_scorer


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    os.environ["OMP_NUM_THREADS"] = str(job["threads"])
    started = time.perf_counter()
    scorer = load_vlm_scorer(ModelSpec(**job["model"]), batch_size=job["per_call"] or len(job["questions"]))
    load_seconds = time.perf_counter() - started
    letters = option_token_ids(scorer.tokenizer)
    conversations = [[{"role": "user", "content": question}] for question in job["questions"]]
    images = [None] * len(conversations)
    step = job["per_call"] or len(conversations)

    def answer() -> list:
        answers = []
        for start in range(0, len(conversations), step):
            batch = slice(start, start + step)
            answers += scorer.choose(conversations[batch], images[batch], letters, job["max_new_tokens"])
        return answers

    seconds, answers = timed(answer, job["repeats"])
    print(json.dumps({"seconds": seconds, "load_seconds": load_seconds, "answers": answers}), flush=True)


if __name__ == "__main__":
    main()
