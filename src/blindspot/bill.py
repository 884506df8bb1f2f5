"""The bill of a run's API models before it sends a request: what `blindspot plan` prints for each API
metric and what `blindspot doctor` holds against the config's `budget`.

Requests: an API metric's, one per image, two per pair scored: the items of the metric's
`score_api_metric` jobs (`blindspot.catalogue`, the numbers the jobs are planned with), each domain's no
more than its annotated pairs' images when the metric scores only those
(`catalogue.annotated_images_per_domain`). An API VLM's (`humblebench.vlms`), one per question of each
setting it answers (`registry.vlm_settings`: the paper's proprietary models answer the Original one): the
items of its `answer_api_humble` jobs (the release's `release_questions`, and two per benchmark image with
`from_benchmark`: an upper bound). Per request:
- input tokens: the judge template's messages filled with a prompt of `PROMPT_CHARS` characters (a
  question: the setting's template filled with a `QUESTION_CHARS` question and five `OPTION_CHARS`
  options, inside the VLM's protocol prompt), at `CHARS_PER_TOKEN` characters a token (a rule of thumb
  for English text, not the provider's tokenizer);
- image tokens: the registry entry's `prices.image_tokens` (the input tokens one image counts as);
- output tokens: the request's `max_completion_tokens` (or `max_tokens`): an upper bound, as a reply is
  billed for the tokens it uses, a reasoning model's reasoning included; without one, unknown (for an
  API VLM, its protocol's budget, `humblebench.max_new_tokens` by default, which its requests are then sent with).
The cost in USD is these at the entry's `prices` (per million tokens, and `per_image`), as read on their
`read` date. Retries are not in it: a job may send its planned requests times `client.max_attempts`,
and no more (`models.api.client`), so the bill can be exceeded by retries only up to that allowance.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot.catalogue import annotated_images_per_domain, job_items
from blindspot.paths import CHECKOUT
from blindspot.prompts import PromptTemplate
from blindspot.registry import answer_protocol, api_vlms, is_api_metric, vlm_settings

Config = dict[str, Any]
PROMPT_CHARS = 400  # a neutral prompt: a sentence or two (the T2I models read at most 256-300 tokens)
CHARS_PER_TOKEN = 4
STEP = "score_api_metric"
ANSWER_STEP = "answer_api_humble"
QUESTION_CHARS = 120  # a HumbleBench question: a sentence
OPTION_CHARS = 20  # an option: a few words
COLUMNS = [
    "step",
    "metric",
    "model",
    "requests",
    "input_tokens",
    "image_tokens",
    "output_tokens",
    "cost_usd",
    "prices_read",
]
NOTE = (
    f"Requests: one per image, two per pair scored (an API metric); one per question and setting (an API VLM). "
    f"Input tokens: the judge template filled with a prompt of {PROMPT_CHARS} characters (a question's template with "
    f"a question of {QUESTION_CHARS} and five options of {OPTION_CHARS}), at {CHARS_PER_TOKEN} characters a token "
    "(an estimate); image tokens: the model's `prices.image_tokens` per request; output tokens: the request's "
    "`max_completion_tokens` per request (an API VLM's default: its protocol's budget), an upper "
    "bound (a reply is billed for what it uses). Cost: at the registry's `prices`, as read on the date shown; "
    "retries are not in it (a job stops before its planned requests x `client.max_attempts`)."
)


def job_requests(config: Config, wildcards: dict[str, str], step: str = STEP) -> int:
    """The requests one job of an API model is planned to send: its items, one request per image (a
    `score_api_metric` job) or per question (an `answer_api_humble` job)."""
    return int(job_items(config, step, wildcards))


def _template_chars(config: Config, metric: str) -> int:
    """Characters of one request's text: the metric's judge template filled with a `PROMPT_CHARS` prompt."""
    template = config["evaluation"]["metrics"][metric].get("args", {}).get("template")
    if template is None:
        return PROMPT_CHARS
    path = Path(template) if Path(template).is_absolute() else CHECKOUT / template
    messages = PromptTemplate.load(path).render(prompt="x" * PROMPT_CHARS)
    return sum(len(message["content"]) for message in messages)


def _output_budget(entry: dict[str, Any]) -> float:
    request = entry.get("request", {})
    budget = request.get("max_completion_tokens", request.get("max_tokens"))
    return math.nan if budget is None else float(budget)


def planned_requests(config: Config, jobs: pd.DataFrame, metric: str) -> int:
    """Requests of `metric`'s jobs in the plan's `jobs` (`plan.job_table`), each domain's capped at its
    annotated pairs' images when the metric scores only those."""
    own = jobs[(jobs["rule"] == STEP) & (jobs["model"] == metric)]
    per_domain = own.groupby("domain")["items"].sum()
    cap = annotated_images_per_domain(config, metric)
    return sum(round(n) if cap is None else min(round(n), cap) for n in per_domain)


def _cost(tokens: float, per_million: float) -> float:
    return 0.0 if per_million == 0 else tokens * per_million / 1e6


def api_bill(config: Config, jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per API metric: requests, estimated input, image and output tokens, and the cost in USD
    (NaN where the model has no `prices`, or no output budget and a price for output)."""
    rows = []
    for metric, spec in config["evaluation"]["metrics"].items():
        if not is_api_metric(config, metric):
            continue
        entry = config["models"][spec["model"]]
        requests = planned_requests(config, jobs, metric)
        text = requests * math.ceil(_template_chars(config, metric) / CHARS_PER_TOKEN)
        output = requests * _output_budget(entry)
        rows.append({"step": STEP, "metric": metric, **_priced(entry, spec["model"], requests, text, output)})
    rows += [answer_row(config, jobs, vlm) for vlm in api_vlms(config)]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.astype({"requests": "int64", "input_tokens": "int64", "image_tokens": "int64"})


def _priced(entry: dict[str, Any], model: str, requests: int, text: int, output: float) -> dict[str, Any]:
    """A bill row's model, requests, tokens (text, images, output) and cost at the entry's `prices`."""
    prices = entry.get("prices")
    images = requests * (prices or {}).get("image_tokens", 0)
    cost = math.nan
    if prices:
        cost = (
            _cost(text + images, prices["input_per_million"])
            + _cost(output, prices["output_per_million"])
            + requests * prices.get("per_image", 0)
        )
    read = str(prices["read"]) if prices else ""
    return {
        "model": model,
        "requests": requests,
        "input_tokens": text,
        "image_tokens": images,
        "output_tokens": output,
        "cost_usd": cost,
        "prices_read": read,
    }


def _question_chars(config: Config, setting: str, vlm: str) -> int:
    """Characters of one question's text as `vlm` is asked it: the setting's template filled with a
    `QUESTION_CHARS` question and five options of `OPTION_CHARS` characters, inside its protocol's prompt."""
    protocol = answer_protocol(config, vlm)
    options = "\n".join(f"{letter}. {'x' * OPTION_CHARS}" for letter in "ABCDE")
    fields = {"question": "x" * QUESTION_CHARS, "options": options, "letters": "A, B, C, D, E"}
    [question] = _template(config["humblebench"]["settings"][setting]["template"]).render(**fields)
    messages = _template(protocol.prompt).render(question=question["content"])
    return len(protocol.system) + sum(len(message["content"]) for message in messages)


def _template(file: str) -> PromptTemplate:
    return PromptTemplate.load(Path(file) if Path(file).is_absolute() else CHECKOUT / file)


def answer_row(config: Config, jobs: pd.DataFrame, vlm: str) -> dict[str, Any]:
    """An API VLM's bill: one request per question of each setting it answers (its `answer_api_humble`
    jobs' items), each with its protocol's budget unless its request sets one."""
    entry = config["models"][vlm]
    own = jobs[(jobs["rule"] == ANSWER_STEP) & (jobs["model"] == vlm)]
    requests = round(own["items"].sum())
    settings = vlm_settings(config, vlm)  # each job asks its questions in every one, as many of each
    text = sum(
        requests // len(settings) * math.ceil(_question_chars(config, name, vlm) / CHARS_PER_TOKEN) for name in settings
    )
    budget = _output_budget(entry)
    output = requests * (answer_protocol(config, vlm).max_tokens if math.isnan(budget) else budget)
    return {"step": ANSWER_STEP, "metric": "", **_priced(entry, vlm, requests, text, output)}


def total_cost(bill: pd.DataFrame) -> float:
    """The bill's total in USD; NaN when a metric's cost is unknown."""
    return float(bill["cost_usd"].sum(skipna=False))
