"""The bill of a run's API models before it sends a request: what `blindspot plan` prints for each API
metric and what `blindspot doctor` holds against the config's `budget`.

Requests: one per image, two per pair scored: the items of the metric's `score_api_metric` jobs
(`blindspot.catalogue`, the numbers the jobs are planned with), each domain's no more than its
annotated pairs' images when the metric scores only those (`catalogue.annotated_images_per_domain`).
Per request:
- input tokens: the judge template's messages filled with a prompt of `PROMPT_CHARS` characters, at
  `CHARS_PER_TOKEN` characters a token (a rule of thumb for English text, not the provider's tokenizer);
- image tokens: the registry entry's `prices.image_tokens` (the input tokens one image counts as);
- output tokens: the request's `max_completion_tokens` (or `max_tokens`): an upper bound, as a reply is
  billed for the tokens it uses, a reasoning model's reasoning included; without one, unknown.
The cost in USD is these at the entry's `prices` (per million tokens, and `per_image`), as read on their
`read` date. Retries are not in it: a job may send its planned requests times `client.max_attempts`,
and no more (`models.api_client`), so the bill can be exceeded by retries only up to that allowance.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from blindspot.catalogue import annotated_images_per_domain, job_items
from blindspot.paths import CHECKOUT
from blindspot.prompts import PromptTemplate
from blindspot.registry import is_api_metric

Config = dict[str, Any]
PROMPT_CHARS = 400  # a neutral prompt: a sentence or two (the T2I models read at most 256-300 tokens)
CHARS_PER_TOKEN = 4
STEP = "score_api_metric"
COLUMNS = ["metric", "model", "requests", "input_tokens", "image_tokens", "output_tokens", "cost_usd", "prices_read"]
NOTE = (
    f"Requests: one per image, two per pair scored. Input tokens: the judge template filled with a prompt of "
    f"{PROMPT_CHARS} characters, at {CHARS_PER_TOKEN} characters a token (an estimate); image tokens: the model's "
    "`prices.image_tokens` per request; output tokens: the request's `max_completion_tokens` per request, an upper "
    "bound (a reply is billed for what it uses). Cost: at the registry's `prices`, as read on the date shown; "
    "retries are not in it (a job stops before its planned requests x `client.max_attempts`)."
)


def job_requests(config: Config, wildcards: dict[str, str]) -> int:
    """The requests one `score_api_metric` job is planned to send: its items, one request per image."""
    return int(job_items(config, STEP, wildcards))


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
    return int(sum(int(n) if cap is None else min(int(n), cap) for n in per_domain))


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
        prices = entry.get("prices")
        text = requests * math.ceil(_template_chars(config, metric) / CHARS_PER_TOKEN)
        images = requests * (prices or {}).get("image_tokens", 0)
        output = requests * _output_budget(entry)
        cost = math.nan
        if prices:
            cost = (
                _cost(text + images, prices["input_per_million"])
                + _cost(output, prices["output_per_million"])
                + requests * prices.get("per_image", 0)
            )
        rows.append({"metric": metric, "model": spec["model"], "requests": requests, "input_tokens": text,
                     "image_tokens": images, "output_tokens": output, "cost_usd": cost,
                     "prices_read": str(prices["read"]) if prices else ""})  # fmt: skip
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.astype({"requests": "int64", "input_tokens": "int64", "image_tokens": "int64"})


def total_cost(bill: pd.DataFrame) -> float:
    """The bill's total in USD; NaN when a metric's cost is unknown."""
    return float(bill["cost_usd"].sum(skipna=False))
