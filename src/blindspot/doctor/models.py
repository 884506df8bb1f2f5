"""The checks of `blindspot doctor` on the models a run loads: each is in the hub cache at its pinned
revision with the files its loader reads, or would be fetched, or is built or local; each fits its
roles; a gated one has a token that opens it; an API model has its key set and its endpoint answers, and
the API models' estimated cost is within the config's `budget`."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from blindspot.doctor.report import FAIL, OK, WARN, Check
from blindspot.hub import cache as hub_cache
from blindspot.hub import fetch as hub_fetch
from blindspot.hub import repos as hub
from blindspot.models import roles
from blindspot.registry import built_model_dir, is_api_model

PROBE_TIMEOUT_S = 5.0


def token_check(model: hub.HubModel, cached: bool, endpoint: str, hub_answers: bool) -> Check:
    """A gated model: cached already, or a token is set and (where the hub answers) opens it."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError

    if cached:
        return Check("token", model.label, OK, "gated, and already in the hub cache")
    if not hub_fetch.has_token():
        return Check(
            "token", model.label, FAIL, hub_fetch.gated_advice(model, endpoint).split(": ", 1)[1] + " (no token found)"
        )
    if not hub_answers:
        return Check("token", model.label, OK, "gated; a token is set (HF_TOKEN or the token file)")
    try:
        HfApi(endpoint=endpoint).auth_check(model.repo_id)
    except GatedRepoError:
        return Check(
            "token", model.label, FAIL, f"the token has no access: accept the terms at {endpoint}/{model.repo_id}"
        )
    except Exception as error:  # HTTP and connection errors alike (see hub_fetch.fetch)
        return Check(
            "token", model.label, WARN, f"a token is set; the hub did not confirm it opens the model ({error})"
        )
    return Check("token", model.label, OK, "gated; the token opens it")


def model_checks(config: dict[str, Any], cache_dir: str | Path, endpoint: str) -> list[Check]:
    """One line per model the run loads (hub models of several registry names share one), then one
    per gated hub model on its token."""
    unreachable: Callable[[], str | None] = cache(lambda: hub_fetch.unreachable(endpoint, PROBE_TIMEOUT_S))
    checks = []
    for name in hub.used_models(config):
        entry = config["models"][name]
        source = hub.model_source(entry)
        if source == "built":
            folder = built_model_dir(config, name)
            archive = entry["build"].get("archive")
            if folder.is_dir():
                checks.append(Check("model", name, OK, f"built in {folder}"))
            elif archive and not Path(archive).is_file():
                checks.append(Check("model", name, FAIL, f"to be built, but its recipe's archive {archive} is missing"))
            else:
                checks.append(Check("model", name, OK, f"will be built by build_model ({entry['build']['recipe']})"))
        elif source == "local":
            verdict = OK if Path(entry["id"]).exists() else FAIL
            checks.append(
                Check("model", name, verdict, f"local {'file' if verdict == OK else 'path missing'}: {entry['id']}")
            )
    states = {}
    for model in hub.hub_models(config):
        state = states[model] = hub_cache.cache_state(model, cache_dir)
        if state.complete:
            checks.append(
                Check(model.repo_type, model.label, OK, f"in the hub cache: {model.at} ({state.commit[:12]})")
            )
            continue
        if state.commit:
            what = f"{model.at} is incomplete in the hub cache (lacks {', '.join(state.lacking[:3])})"
        elif state.other_commits:
            what = f"{model.at} is not in the hub cache, only {', '.join(c[:12] for c in state.other_commits)}"
        else:
            what = f"{model.at} is not in the hub cache"
        reason = unreachable()
        if reason is None:
            checks.append(Check(model.repo_type, model.label, WARN, f"{what}; `blindspot fetch-models` would fetch it"))
        else:
            advice = f"{what}, and {reason}: run `blindspot fetch-models` where the hub answers"
            checks.append(Check(model.repo_type, model.label, FAIL, advice))
    for model, state in states.items():
        if model.gated:
            checks.append(token_check(model, state.complete, endpoint, not state.complete and unreachable() is None))
    return checks


def role_checks(config: dict[str, Any], cache_dir: str | Path) -> list[Check]:
    """One line per model (and kind of role) whose config.json is there now: does it fit its roles."""
    checks = []
    for fit in roles.role_fits(config, cache_dir):
        verdict = {True: OK, False: FAIL, None: WARN}[fit.takes]
        checks.append(Check("role", fit.name, verdict, f"{', '.join(fit.keys)} through {fit.loader}: {fit.reason}"))
    return checks


def api_checks(config: dict[str, Any]) -> list[Check]:
    """Each API model's key variable and, when it is set, its endpoint (GET {endpoint}/models). Without
    its key a metric's jobs, or an API VLM's answers, are skipped and the run goes on
    (`protobias.metric_scores.metric_loader`, `steps.humble.answer_humble`): a warning."""
    import requests

    checks = []
    for name in hub.used_models(config):
        entry = config["models"][name]
        if not is_api_model(entry):
            continue
        variable, endpoint = entry["api_key_env"], entry["endpoint"].rstrip("/")
        key = os.environ.get(variable, "")
        metrics = [m for m, metric in config["evaluation"]["metrics"].items() if metric.get("model") == name]
        answers = name in config["humblebench"]["vlms"]
        if not key:
            if metrics or answers:
                skipped = f"metric {', '.join(metrics)}" if metrics else "its HumbleBench answers"
                skipped += f"{' and its HumbleBench answers' if metrics and answers else ''} will be skipped"
                checks.append(
                    Check("api key", name, WARN, f"${variable} is not set: {skipped} (its endpoint is not probed)")
                )
            else:  # loaded by a metric as a helper: nothing skips that metric without the key
                checks.append(Check("api key", name, FAIL, f"${variable} is not set, and a metric's jobs load {name}"))
            continue
        checks.append(Check("api key", name, OK, f"${variable} is set"))
        try:
            answer = requests.get(
                f"{endpoint}/models", headers={"Authorization": f"Bearer {key}"}, timeout=PROBE_TIMEOUT_S
            )
        except requests.RequestException as error:
            checks.append(Check("api endpoint", name, FAIL, f"{endpoint} does not answer ({type(error).__name__})"))
            continue
        if answer.status_code in (401, 403):
            refused = f"{endpoint} refused the key in ${variable} (HTTP {answer.status_code})"
            checks.append(Check("api endpoint", name, FAIL, refused))
        else:
            checks.append(Check("api endpoint", name, OK, f"{endpoint} answers (HTTP {answer.status_code})"))
    return checks


def budget_checks(config: dict[str, Any]) -> list[Check]:
    """The API models' estimated cost (`blindspot plan`'s bill) against the config's `budget`: a warning
    above it, or when a model's cost is unknown (no `prices`); nothing without a budget or API metrics."""
    from blindspot import bill, plan

    budget = config.get("budget")
    if budget is None:
        return []
    frame = bill.api_bill(config, plan.job_table(config))
    if frame.empty:
        return []
    total = bill.total_cost(frame)
    unpriced = frame.loc[frame["cost_usd"].isna(), "model"].tolist()
    if unpriced:
        reason = f"the cost of {', '.join(unpriced)} is unknown (no `prices` or no output budget in the registry)"
        return [Check("budget", "API models", WARN, reason)]
    reads = ", ".join(sorted(set(frame["prices_read"])))
    requests = int(frame["requests"].sum())
    reason = f"the plan's estimate is {total:,.2f} USD for {requests:,} requests (prices read {reads})"
    if total > budget:
        return [Check("budget", "API models", WARN, f"{reason}, above the budget of {budget:,.2f} USD (`budget`)")]
    return [Check("budget", "API models", OK, f"{reason}, within the budget of {budget:,.2f} USD")]
