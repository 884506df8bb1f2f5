"""HumbleBench's tables and plot from answer tables: metrics per VLM x setting x reading, Tables 4, 5
and 6 of the paper, Table 7 against human answers, and NOTA hit against false-NOTA per model and
setting. Values in tables are percentages, as in the paper; the metrics CSV keeps fractions.

Each setting's config names its `label` and its `headline` metric: the column it gets in Table 6 and
what ranks models for it in Table 5 (overall accuracy for the settings with real labels, the NOTA
selection rate for the noise settings, the NOTA hit rate for NOTA-only).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from blindspot.humblebench.humility import (
    ANSWER_COLUMNS,
    humility_intervals,
    humility_metrics,
    image_clusters,
    require_columns,
)
from blindspot.io import atomic_path, read_csv, stable_id, write_text
from blindspot.registry import MODEL_GROUPS
from blindspot.reporting import Cell, write_report_table
from blindspot.sampling import marked_caption, marked_table
from blindspot.schemas import HUMAN_ANSWERS

READINGS = ("text", "logits")
HEADLINES = {"overall": "Overall", "nota_selection": "NOTA sel.", "nota_hit": "NOTA hit"}
TABLE4_COLUMNS = {
    "object": "Object",
    "relation": "Relation",
    "attribute": "Attribute",
    "overall": "Overall",
    "non_nota_accuracy": "Non-NOTA",
    "nota_hit": "NOTA hit",
    "false_nota": "False-NOTA",
    "humility": "HS",
}


def _require_answers(answers: pd.DataFrame, readings: Sequence[str]) -> None:
    columns = ["vlm", "setting", "question_id", *(c for c in ANSWER_COLUMNS if c != "prediction")]
    require_columns(answers, [*columns, *(f"prediction_{reading}" for reading in readings)], "HumbleBench answers")
    for column in ("vlm", "setting", "question_id"):
        unnamed = answers[answers[column].isna() | (answers[column] == "")]
        if len(unnamed):
            raise ValueError(
                f"HumbleBench answers: {len(unnamed)} rows have no {column} (first: row {unnamed.index[0]})"
            )


def metrics_table(
    answers: pd.DataFrame,
    readings: Sequence[str] = READINGS,
    images: Mapping[str, str] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Every metric per VLM x setting x reading (the letter distribution's and the text's, or those of
    `readings` where a run has only some), as fractions, each of INTERVAL_METRICS with its 95% interval
    (`humility_intervals`: resampling `images`' images, question_id -> image, each with all of its
    questions; each question its own where not given); and `cut_off`, the share of answers the token budget
    cut off (a reasoning model's budget too small), where the answers say (not those made elsewhere). The
    resamples of a setting are the same for every VLM and reading that answered its questions: paired."""
    if answers.empty:
        raise ValueError("no HumbleBench answers: no source gave questions (release, from_benchmark, scene_graphs)")
    _require_answers(answers, readings)
    rows = []
    for (vlm, setting), group in answers.groupby(["vlm", "setting"], sort=False):
        clusters = image_clusters(list(group["question_id"]), images)
        for reading in readings:
            frame = group.assign(prediction=group[f"prediction_{reading}"])
            cut = float(group["cut_off"].eq(True).mean()) if "cut_off" in group else math.nan
            intervals = humility_intervals(
                frame, clusters, n_boot, np.random.default_rng([seed, int(stable_id(setting), 16)])
            )
            rows.append(
                {"vlm": vlm, "setting": setting, "reading": reading, **humility_metrics(frame), "cut_off": cut}
                | intervals
            )
    return pd.DataFrame(rows)


def _percent(value: float) -> float:
    return round(100 * value, 2) if not math.isnan(value) else math.nan


def _one_reading(metrics: pd.DataFrame, reading: str, columns: Sequence[str]) -> pd.DataFrame:
    """The metrics of one reading, which must have `columns` and rows of that reading."""
    require_columns(metrics, ["vlm", "setting", "reading", *columns], "HumbleBench metrics")
    part = metrics[metrics["reading"] == reading]
    if part.empty:
        have = sorted(set(metrics["reading"]))
        raise ValueError(f"HumbleBench metrics: no rows of reading {reading!r} (have {have})")
    return part


# Models = registry name -> its `group` (a key of `registry.MODEL_GROUPS`, or None).
Groups = Mapping[str, str | None]
OTHER_GROUP = "Other models"  # the heading of the models of no group, after the groups
LOWER_IS_BETTER = frozenset({"False-NOTA"})  # the columns whose best value is the lowest


def _has_groups(groups: Groups | None) -> bool:
    return any(group in MODEL_GROUPS for group in (groups or {}).values())


def grouped(table: pd.DataFrame, groups: Groups | None) -> pd.DataFrame:
    """`table` (a row per model, its name under `Model`) with its rows under a heading row per model group,
    as the paper's Tables 4 and 6: the groups in `registry.MODEL_GROUPS`' order, the models of none last under
    OTHER_GROUP, each group's models in the table's order; a heading row holds "" in every other column.
    Without groups (`groups` empty or naming none), the table as it is."""
    if not _has_groups(groups):
        return table
    keys = [group if (group := groups.get(model)) in MODEL_GROUPS else None for model in table["Model"]]
    rows: list[dict[str, Any]] = []
    for key in [*MODEL_GROUPS, None]:
        part = table[[found == key for found in keys]]
        if len(part):
            rows += [{"Model": MODEL_GROUPS.get(key, OTHER_GROUP), **dict.fromkeys(table.columns[1:], "")}]
            rows += part.to_dict("records")
    return pd.DataFrame(rows, columns=table.columns, dtype=object)


def best_cells(table: pd.DataFrame, lower_is_better: frozenset[str] = LOWER_IS_BETTER) -> set[Cell]:
    """The cells (row position, column) that hold the best value of their column within their group of rows
    (the rows between heading rows, `grouped`; the whole table without headings), every one of a tie: what
    the paper sets in bold. Higher is better, except in the columns `lower_is_better` names."""
    values = table.drop(columns="Model").apply(pd.to_numeric, errors="coerce").reset_index(drop=True)
    heading = table.drop(columns="Model").eq("").all(axis=1).to_numpy()
    cells: set[Cell] = set()
    for _, part in values[~heading].groupby(heading.cumsum()[~heading]):
        for column in part.columns:
            known = part[column].dropna()
            if len(known):
                best = known.min() if column in lower_is_better else known.max()
                cells |= {(int(i), column) for i in known.index[known == best]}
    return cells


def table4(metrics: pd.DataFrame, reading: str, setting: str, groups: Groups | None = None) -> pd.DataFrame:
    """Table 4: per type and overall accuracy, non-NOTA accuracy, NOTA hit, false-NOTA and the humility
    score of each model in one setting (the Original one in the paper), the models in their `groups`."""
    part = _one_reading(metrics, reading, list(TABLE4_COLUMNS))
    part = part[part["setting"] == setting]
    table = part[["vlm", *TABLE4_COLUMNS]].rename(columns={"vlm": "Model", **TABLE4_COLUMNS})
    table = table.assign(**{c: table[c].map(_percent) for c in TABLE4_COLUMNS.values()}).reset_index(drop=True)
    return grouped(table, groups)


# Appendix Table 2's measures: Table 4's headline ones, each with its interval.
INTERVAL_COLUMNS = {"overall": "Overall", "nota_hit": "NOTA hit", "false_nota": "False-NOTA", "humility": "HS"}


def interval_table(metrics: pd.DataFrame, reading: str, setting: str, groups: Groups | None = None) -> pd.DataFrame:
    """Appendix Table 2: each model's overall accuracy, NOTA hit, false-NOTA and HS in one setting, % with the 95%
    interval that resamples images (`humility_intervals`), the models in their `groups`."""
    bounds = [f"{metric}{bound}" for metric in INTERVAL_COLUMNS for bound in ("_low", "_high")]
    part = _one_reading(metrics, reading, [*INTERVAL_COLUMNS, *bounds])
    part = part[part["setting"] == setting]

    def cell(row: Any, metric: str) -> str:
        value, low, high = (_percent(row[f"{metric}{bound}"]) for bound in ("", "_low", "_high"))
        if math.isnan(value):
            return "n/a"
        return f"{value:.2f}" + ("" if math.isnan(low) else f" [{low:.2f}, {high:.2f}]")

    rows = [
        {"Model": row["vlm"], **{label: cell(row, m) for m, label in INTERVAL_COLUMNS.items()}}
        for _, row in part.iterrows()
    ]
    return grouped(pd.DataFrame(rows, columns=["Model", *INTERVAL_COLUMNS.values()]), groups)


def full_population(metrics: pd.DataFrame, settings: Sequence[str]) -> list[str]:
    """The models that answered every one of `settings`, in the table's order: whom the paper's averages
    across settings are over (Table 5, the appendix table: its 20 open models; its proprietary ones
    answered the Original setting only), so that every row averages the same models."""
    answered = metrics.groupby("vlm", sort=False)["setting"].agg(set)
    return [vlm for vlm, have in answered.items() if set(settings) <= have]


def population_note(metrics: pd.DataFrame, settings: Sequence[str]) -> str:
    """What a table over `full_population` says of it: how many models, and who is left out and why."""
    models = list(dict.fromkeys(metrics["vlm"]))
    kept = full_population(metrics, settings)
    note = f"over the {len(kept)} models that answered every setting"
    left = [model for model in models if model not in kept]
    return note + (f" (left out, answering fewer: {', '.join(left)})" if left else "")


def protocol_note(answers: pd.DataFrame) -> str:
    """Which protocol the answers ran under (`humblebench.protocols`), for a caption: "" where they do not
    say (answers made elsewhere, `blindspot humble score`)."""
    named = sorted({name for name in answers.get("protocol", pd.Series(dtype=str)).dropna() if name})
    return f", {' and '.join(named)} protocol" if named else ""


def _best(part: pd.DataFrame, metric: str) -> str:
    known = part.dropna(subset=[metric])
    if known.empty:
        return "-"
    top = known.loc[known[metric].idxmax()]
    return f"{top['vlm']} ({_percent(top[metric]):.2f})"


def table5(metrics: pd.DataFrame, reading: str, settings: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Table 5: per setting, the number of models, average overall accuracy, humility score, macro-F1
    and NOTA selection rate, and the best models: by overall accuracy and by humility score, or by the
    setting's headline metric when that is not overall accuracy. Every row is over the same models, those
    that answered every setting (`full_population`)."""
    headlines = {setting["headline"] for setting in settings.values()}
    part = _one_reading(metrics, reading, ["overall", "humility", "macro_f1", "nota_selection", *sorted(headlines)])
    part = part[part["vlm"].isin(full_population(part, list(settings)))]
    rows = []
    for name, setting in settings.items():
        cells = part[part["setting"] == name]
        if cells.empty:
            continue
        headline = setting["headline"]
        best = (
            f"{_best(cells, 'overall')} / {_best(cells, 'humility')}"
            if headline == "overall"
            else f"{HEADLINES[headline]}: {_best(cells, headline)}"
        )
        rows.append(
            {
                "Setting": setting["label"],
                "# Models": len(cells),
                "Avg. Overall": _percent(cells["overall"].mean()),
                "Avg. HS": _percent(cells["humility"].mean()),
                "Avg. Macro-F1": _percent(cells["macro_f1"].mean()),
                "Avg. NOTA Sel.": _percent(cells["nota_selection"].mean()),
                "Best Model(s)": best,
            }
        )
    return pd.DataFrame(rows)


def table6(
    metrics: pd.DataFrame, reading: str, settings: Mapping[str, Mapping[str, Any]], groups: Groups | None = None
) -> pd.DataFrame:
    """Table 6: one row per model that answered every setting (`full_population`), in their `groups`, one
    column per setting holding the setting's headline metric."""
    part = _one_reading(metrics, reading, sorted({setting["headline"] for setting in settings.values()}))
    columns = {name: f"{s['label']} ({HEADLINES[s['headline']]})" for name, s in settings.items()}
    table = pd.DataFrame({"Model": full_population(part, list(settings))})
    for name, setting in settings.items():
        cells = part[part["setting"] == name].set_index("vlm")[setting["headline"]]
        table[columns[name]] = table["Model"].map(cells).map(_percent)
    return grouped(table, groups)


SHIFT_COLUMNS = {
    "nota_selection": "NOTA Selection",
    "nota_hit": "NOTA Hit",
    "false_nota": "False-NOTA",
    "non_nota_accuracy": "Non-NOTA Acc.",
    "d_prime": "d'",
}


def shift_table(metrics: pd.DataFrame, reading: str, before: str, after: str) -> pd.DataFrame:
    """The appendix's Table 1 (Original -> Cautious prompt in the paper): per model, how each NOTA
    measure moves from the setting `before` to `after`, "before -> after" as the paper prints it
    (percentages; d' as it is, two decimals; "-" where a setting has no value), for the models that
    answered both settings (`full_population`), and a last row "Average" over those that have both values,
    as the paper's last row averages over its 20: both sides of an arrow average the same models."""
    part = _one_reading(metrics, reading, list(SHIFT_COLUMNS))
    models = full_population(part, [before, after])
    part = part.set_index(["setting", "vlm"])

    def value(setting: str, model: str | None, metric: str) -> float:
        if model is not None:
            return part[metric].get((setting, model), math.nan)
        both = [m for m in models if not (math.isnan(value(before, m, metric)) or math.isnan(value(after, m, metric)))]
        values = [value(setting, m, metric) for m in both]
        return statistics.fmean(values) if values else math.nan

    def shown(setting: str, model: str | None, metric: str) -> str:
        number = value(setting, model, metric)
        return "-" if math.isnan(number) else f"{number:.2f}" if metric == "d_prime" else f"{100 * number:.2f}"

    rows = [
        {
            "Model": model or "Average",
            **{
                title: f"{shown(before, model, metric)} → {shown(after, model, metric)}"
                for metric, title in SHIFT_COLUMNS.items()
            },
        }
        for model in [*models, None]
    ]
    return pd.DataFrame(rows, columns=["Model", *SHIFT_COLUMNS.values()])


def read_human_answers(path: str | Path) -> pd.DataFrame:
    """Human answers from a CSV `annotator,question_id,setting,answer` (a letter of the options as shown in
    that setting, or empty when the person gave none), as `schemas.HUMAN_ANSWERS`: what the annotation
    page's and Label Studio's answers become too (`human_study.answers_from_labels`)."""
    frame = read_csv(path, "human answers", dtype=str, keep_default_na=False)
    missing = set(HUMAN_ANSWERS.names) - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: human answers lack columns {sorted(missing)}")
    bad = frame[~frame["answer"].isin(["", "A", "B", "C", "D", "E"])]
    if len(bad):
        raise ValueError(f"{path}: row {bad.index[0] + 2} answers {bad['answer'].iloc[0]!r} (a letter A-E or empty)")
    return frame[list(HUMAN_ANSWERS.names)]


TABLE7_COLUMNS = {
    "overall": "Overall",
    "non_nota_accuracy": "Non-NOTA",
    "nota_hit": "NOTA hit",
    "false_nota": "False-NOTA",
    "humility": "HS",
}


def _table7_cells(frame: pd.DataFrame, original: str, stress: str) -> dict[str, float]:
    normal_part, stress_part = frame[frame["setting"] == original], frame[frame["setting"] == stress]
    cells = dict.fromkeys([*TABLE7_COLUMNS.values(), "NOTA hit (stress)"], math.nan)
    if len(normal_part):
        found = humility_metrics(normal_part)
        cells |= {name: found[key] for key, name in TABLE7_COLUMNS.items()}
    if len(stress_part):
        cells["NOTA hit (stress)"] = humility_metrics(stress_part)["nota_hit"]
    return cells


def table7(
    answers: pd.DataFrame, humans: pd.DataFrame, reading: str, original: str = "original", stress: str = "nota_only"
) -> pd.DataFrame:
    """Table 7: humans and models on the same questions. For each annotator's question set, the
    metrics of the person and of each model in the `original` setting, and the NOTA hit rate in the
    `stress` setting; each row averages over the annotators' sets, the people's row named as the paper's
    ("Human (mean of 5)")."""
    _require_answers(answers, [reading])
    shown = answers.drop_duplicates(["setting", "question_id"]).set_index(["setting", "question_id"])
    people = humans.join(shown[["label", "nota", "type", "letter_map"]], on=["setting", "question_id"])
    unknown = people[people["label"].isna()]
    if len(unknown):
        raise ValueError(
            f"human answer to question {unknown['question_id'].iloc[0]} in setting {unknown['setting'].iloc[0]}, "
            "which no model was asked"
        )
    people = people.rename(columns={"answer": "prediction"})
    models = answers.assign(prediction=answers[f"prediction_{reading}"])
    model_keys = list(zip(models["setting"], models["question_id"], strict=True))
    cells: dict[str, list[dict[str, float]]] = {}
    for _, own in people.groupby("annotator", sort=True):
        asked = set(zip(own["setting"], own["question_id"], strict=True))
        same = models[[key in asked for key in model_keys]]
        for who, frame in [(f"Human (mean of {people['annotator'].nunique()})", own), *same.groupby("vlm", sort=False)]:
            cells.setdefault(who, []).append(_table7_cells(frame, original, stress))
    rows = [{"Model": who, **pd.DataFrame(sets).mean().map(_percent).to_dict()} for who, sets in cells.items()]
    table = pd.DataFrame(rows).astype({"NOTA hit (stress)": object})
    # A model not asked the stress setting (the paper's proprietary ones) has "-" there, as the paper prints.
    stressed, asked = set(models.loc[models["setting"] == stress, "vlm"]), set(models["vlm"])
    table.loc[[who in asked and who not in stressed for who in table["Model"]], "NOTA hit (stress)"] = "-"
    return table


MARKED = ("table4", "table6")  # the tables that set each group's best value in bold, as the paper's


def report_tables(
    answers: pd.DataFrame,
    humans: pd.DataFrame | None,
    reading: str,
    settings: Mapping[str, Mapping[str, Any]],
    original: str,
    stress: str,
    cautious: str | None = None,
    readings: Sequence[str] = READINGS,
    groups: Groups | None = None,
    images: Mapping[str, str] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[pd.DataFrame, dict[str, tuple[pd.DataFrame, str]]]:
    """Every metric per VLM x setting x reading of `readings` (`metrics_table`), and by name Tables 4 to
    6 of `reading`, 7 given people's answers (`read_human_answers`) and, given a `cautious` setting among
    `settings`, the appendix's Original -> Cautious table, each with its caption; `original` is the setting of Table 4,
    of Table 7's normal columns and of the appendix table's left side, `stress` that of Table 7's NOTA hit
    under stress. Tables 4 and 6 list the models in their `groups` (registry name -> `group`), as the paper.
    `images`, `n_boot` and `seed`: the metrics' intervals (`metrics_table`)."""
    if original not in settings:
        raise ValueError(f"Table 4's setting {original!r} is not one of the settings {list(settings)}")
    found = metrics_table(answers, readings, images, n_boot, seed)
    among = "in each model group" if _has_groups(groups) else "of the models"
    bold = f"bold: the best {among} (False-NOTA: the lowest)"
    ran = f"{reading} reading{protocol_note(answers)}"
    everyone = population_note(found, list(settings))
    report = {
        "table4": (
            table4(found, reading, original, groups),
            f"Table 4: the {settings[original]['label']} setting ({ran}), %; {bold}",
        ),
        "table5": (table5(found, reading, settings), f"Table 5: the settings ({ran}), %, {everyone}"),
        "table6": (
            table6(found, reading, settings, groups),
            f"Table 6: models across settings ({ran}), %, {everyone}; {bold}",
        ),
    }
    report["table_a2"] = (
        interval_table(found, reading, original, groups),
        f"Appendix Table 2: the {settings[original]['label']} setting ({ran}), % with the 95% percentile-bootstrap "
        "interval, resampling images with all of their questions (docs/fidelity.md H12)",
    )
    if humans is not None:
        report["table7"] = (
            table7(answers, humans, reading, original, stress),
            f'Table 7: humans and models on the same questions ({ran}), %; "-": a model not asked the stress setting',
        )
    if cautious in settings:
        report["table_a1"] = (
            shift_table(found, reading, original, cautious),
            f"Appendix Table 1: {settings[original]['label']} → {settings[cautious]['label']}, NOTA behaviour "
            f"per model ({ran}), % (d' as it is), {population_note(found, [original, cautious])}",
        )
    return found, report


def write_report(
    found: pd.DataFrame,
    report: Mapping[str, tuple[pd.DataFrame, str]],
    reading: str,
    settings: Mapping[str, Mapping[str, str]],
    metrics: str | Path,
    tables: Mapping[str, Sequence[str]],
    plot: str | Path,
    sample: str | None = None,
) -> None:
    """Write every metric (CSV), each report table to its files (`tables[name]`: CSV, Markdown, LaTeX; in
    Tables 4 and 6 each group's best in bold, `best_cells`) and the NOTA plot: what the workflow and
    `blindspot humble score` both write. On a `sample` of the questions (its label, `sampling.sample_label`)
    the CSVs' rows, the captions and the plot's title say so."""
    write_text(metrics, marked_table(found, sample).to_csv(index=False))
    for name, (table, caption) in report.items():
        write_report_table(
            table, *tables[name], caption=caption, bold=best_cells(table) if name in MARKED else (), sample=sample
        )
    plot_nota_tradeoff(found, reading, settings, plot, sample)


def tradeoff_points(metrics: pd.DataFrame, reading: str, settings: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """The NOTA plot's points: NOTA hit and false-NOTA rate per model and setting, for the settings read
    by overall accuracy (`headline`), whose labels are what the image supports. Left out are the noise
    settings (read by NOTA selection: a NOTA there is no false NOTA), NOTA-only (no false-NOTA rate) and
    what `settings` does not name."""
    part = _one_reading(metrics, reading, ["nota_hit", "false_nota"]).dropna(subset=["nota_hit", "false_nota"])
    return part[part["setting"].isin([name for name, entry in settings.items() if entry["headline"] == "overall"])]


def plot_nota_tradeoff(
    metrics: pd.DataFrame,
    reading: str,
    settings: Mapping[str, Mapping[str, Any]],
    path: str | Path,
    sample: str | None = None,
) -> None:
    """NOTA hit rate (y) against false-NOTA rate (x), one marker per model and setting (`tradeoff_points`);
    the diagonal is a model that picks NOTA at random. The title says when the answers are on a `sample`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    part = tradeoff_points(metrics, reading, settings)
    figure = Figure(figsize=(6.5, 5.0), dpi=150, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    markers = {name: "os^vDP*"[i % 7] for i, name in enumerate(settings)}
    models = list(dict.fromkeys(part["vlm"]))
    colours = dict(zip(models, [f"C{i % 10}" for i in range(len(models))], strict=True))
    for row in part.itertuples(index=False):
        axes.scatter(row.false_nota, row.nota_hit, marker=markers[row.setting], color=colours[row.vlm])
    for name in settings:
        if name in set(part["setting"]):
            axes.scatter([], [], marker=markers[name], color="0.4", label=settings[name]["label"])
    for model in models:
        axes.scatter([], [], marker="s", color=colours[model], label=model)
    axes.plot([0, 1], [0, 1], color="black", linestyle="--", linewidth=1, label="chance")
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_xlabel("False-NOTA rate")
    axes.set_ylabel("NOTA hit rate")
    axes.set_title(marked_caption(f"NOTA detection per model and setting ({reading} reading)", sample))
    figure.legend(loc="outside right upper", fontsize="small")
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
