import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from helpers.unreadable_csvs import UNREADABLE_CSVS, assert_one_line_error
from PIL import Image
from sklearn.metrics import cohen_kappa_score

from blindspot import schemas
from blindspot.bootstrap import bootstrap_accuracy, bootstrap_kappa, cohen_kappa
from blindspot.io import read_table, write_table
from blindspot.protobias.accuracy import (
    BREAKDOWN_COLUMNS,
    HUMAN,
    accuracy_breakdown,
    pairwise_correct,
    pairwise_outcomes,
    read_human_choices,
    write_breakdown,
)
from blindspot.protobias.table3 import (
    HUMAN_FAMILY,
    plot_accuracy,
    table3,
    table3_caption,
    with_human_kappa,
    write_table3,
)

METRICS = {
    "clip": {"family": "Embedding-based text-image metrics", "label": "CLIPScore"},
    "pick": {"family": "Human-feedback-based reward metrics", "label": "PickScore"},
    "blip": {"family": "Embedding-based text-image metrics", "label": "BLIPv2Score"},
}


def score_rows(metric, values):
    """values: {pair_id: (corr_raw, adv_raw)}."""
    return [
        {
            "pair_id": p,
            "domain": "",
            "metric": metric,
            "model_id": f"org/{metric}",
            "model_revision": "r1",
            "prompt": "a cat",
            "corr_raw": c,
            "adv_raw": a,
            "corr_score": c,
            "adv_score": a,
            "corr_detail": "",
            "adv_detail": "",
        }
        for p, (c, a) in values.items()
    ]


def bench():
    """Six test pairs and one train pair."""
    rows = [
        ("p1", "animals", "flux", "color", "birds"),
        ("p2", "animals", "flux", "pose", "birds"),
        ("p3", "animals", "sana", "color", "cats"),
        ("p4", "objects", "flux", "color", "tools"),
        ("p5", "objects", "sana", "color", "tools"),
        ("p6", "objects", "sana", "material", "tools"),
    ]
    pairs = pd.DataFrame(rows, columns=["pair_id", "domain", "t2i", "knob", "subcategory"]).assign(split="test")
    train = pd.DataFrame(
        [
            {
                "pair_id": "p0",
                "domain": "animals",
                "t2i": "flux",
                "knob": "color",
                "subcategory": "birds",
                "split": "train",
            }
        ]
    )
    return pd.concat([pairs, train], ignore_index=True)


def scores():
    clip = {"p0": (9, 1), "p1": (0.9, 0.1), "p2": (0.5, 0.5), "p3": (np.nan, 0.2), "p4": (0.8, 0.2), "p5": (0.3, 0.4)}
    pick = dict.fromkeys(("p1", "p2", "p3", "p4", "p5", "p6"), (1.0, 0.0))  # always right
    return pd.DataFrame(score_rows("clip", clip) + score_rows("pick", pick))


def test_ties_and_nan_are_failures():
    frame = pd.DataFrame(
        {"corr_raw": [0.9, 0.5, np.nan, 0.7, np.nan, 0.1], "adv_raw": [0.1, 0.5, 0.2, np.nan, np.nan, 0.2]}
    )
    assert pairwise_correct(frame).tolist() == [True, False, False, False, False, False]


def test_missing_scores_fail_train_pairs_are_dropped_unknown_pairs_raise(caplog):
    correct, unscored = pairwise_outcomes(scores(), bench(), ["clip", "pick"])
    assert list(correct.index) == ["p1", "p2", "p3", "p4", "p5", "p6"]  # p0 is train
    assert correct["clip"].tolist() == [True, False, False, True, False, False]  # p6 has no clip row
    assert unscored["clip"].tolist() == [False, False, True, False, False, True]
    assert correct["pick"].all()
    assert not unscored["pick"].any()
    stray = pd.concat([scores(), pd.DataFrame(score_rows("clip", {"zz": (1, 0)}))])
    with pytest.raises(ValueError, match="not benchmark pairs"):
        pairwise_outcomes(stray, bench())
    with pytest.raises(ValueError, match="several scores"):
        pairwise_outcomes(pd.concat([scores(), scores()]), bench())
    correct, _ = pairwise_outcomes(scores(), bench(), ["pick", "vqa", "clip"])  # vqa never scored (skipped)
    assert list(correct.columns) == ["pick", "clip"]
    assert "no scores for metric(s) ['vqa']" in caplog.text


@pytest.mark.parametrize("seed", range(6))
def test_kappa_equals_sklearn_on_random_binary_data(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, size=50 + 40 * seed)
    b = np.where(rng.random(a.size) < 0.3 + 0.1 * seed, a, rng.integers(0, 2, size=a.size))
    assert cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    assert cohen_kappa(a.astype(bool), b.astype(bool)) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)


def test_kappa_on_a_hand_computed_table():
    # 2x2 table: both yes 20, a only 5, b only 10, both no 15 (n = 50).
    a = np.array([1] * 20 + [1] * 5 + [0] * 10 + [0] * 15)
    b = np.array([1] * 20 + [0] * 5 + [1] * 10 + [0] * 15)
    p_o = 35 / 50
    p_e = (25 / 50) * (30 / 50) + (25 / 50) * (20 / 50)  # 0.3 + 0.2
    assert cohen_kappa(a, b) == pytest.approx((p_o - p_e) / (1 - p_e))  # 0.4
    assert cohen_kappa(a, b) == pytest.approx(0.4)


def test_kappa_is_nan_when_undefined_and_zero_when_one_rater_is_constant():
    ones = np.ones(10, dtype=bool)
    assert np.isnan(cohen_kappa(ones, ones))  # chance agreement is 1
    assert np.isnan(cohen_kappa([], []))
    assert all(np.isnan(bootstrap_kappa(ones, ones)))
    mixed = np.arange(10) % 2 == 0
    assert cohen_kappa(ones, mixed) == 0
    with pytest.raises(ValueError, match="binary"):
        cohen_kappa([0, 2], [0, 1])


def test_bootstrap_interval_covers_the_true_accuracy_at_about_the_nominal_rate():
    rng = np.random.default_rng(7)
    covered = 0
    for i in range(300):
        correct = rng.random(150) < 0.7
        estimate = bootstrap_accuracy(correct, seed=i)
        assert estimate.low <= estimate.value <= estimate.high
        covered += estimate.low <= 0.7 <= estimate.high
    assert 0.90 <= covered / 300 <= 0.985


def test_the_binomial_shortcut_matches_resampling_pairs():
    rng = np.random.default_rng(3)
    correct = rng.random(150) < 0.6
    means = correct[rng.integers(0, 150, size=(4000, 150))].mean(axis=1)
    literal = np.quantile(means, [0.025, 0.975])
    estimate = bootstrap_accuracy(correct, n_boot=4000, seed=4)
    assert estimate.low == pytest.approx(literal[0], abs=0.02)
    assert estimate.high == pytest.approx(literal[1], abs=0.02)


def test_bootstrap_is_seeded_and_kappa_interval_brackets_kappa():
    rng = np.random.default_rng(0)
    a = rng.random(200) < 0.5
    b = np.where(rng.random(200) < 0.6, a, rng.random(200) < 0.5)
    assert bootstrap_kappa(a, b, seed=1) == bootstrap_kappa(a, b, seed=1)
    kappa = bootstrap_kappa(a, b, seed=1)
    assert kappa.value == pytest.approx(cohen_kappa_score(a, b))
    assert kappa.low < kappa.value < kappa.high
    assert kappa.high - kappa.low < 0.4
    assert all(np.isnan(bootstrap_accuracy([])))


def test_human_choices_csv_is_validated(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("pair_id,choice\np1,corr\np2,adv\np3,neither\n")
    assert read_human_choices(good).to_dict("list") == {
        "pair_id": ["p1", "p2", "p3"],
        "choice": ["corr", "adv", "neither"],
    }
    cases = {
        "pair_id,vote\np1,corr\n": r"missing column\(s\) \['choice'\]",
        "pair_id,choice\np1,corr\np2,Corr\n": r"line 3 \(pair_id 'p2'\): choice 'Corr' is not one of corr, adv",
        "pair_id,choice\np1,corr\np2,\n": r"line 3 \(pair_id 'p2'\): choice ''",
        "pair_id,choice\np1,corr\n,adv\n": "line 3: empty pair_id",
        "pair_id,choice\np1,corr\np2,adv\np1,adv\n": "line 4: pair_id 'p1' repeats .*line 2",
    }
    for i, (text, message) in enumerate(cases.items()):
        bad = tmp_path / f"bad{i}.csv"
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_human_choices(bad)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        *UNREADABLE_CSVS,
        pytest.param(
            b"pair_id,vote\np1,corr\n", "missing column(s) ['choice']; expected pair_id,choice", id="missing-column"
        ),
    ],
)
def test_an_unreadable_human_choices_file_is_one_line_naming_it(tmp_path, content, problem):
    assert_one_line_error(read_human_choices, tmp_path / "humans.csv", content, problem)


def humans():
    return pd.DataFrame(
        {"pair_id": ["p1", "p2", "p3", "p4", "p5"], "choice": ["corr", "adv", "corr", "corr", "neither"]}
    )


def test_breakdown_groups_and_counts():
    out = accuracy_breakdown(scores(), bench(), ["clip", "pick"], n_boot=200)
    assert list(out.columns) == BREAKDOWN_COLUMNS
    clip = out[out["metric"] == "clip"].set_index(["breakdown", "group"])
    groups = {b: list(clip.loc[b].index) for b in ("overall", "domain", "knob", "t2i", "subcategory")}
    assert groups == {
        "overall": ["all"],
        "domain": ["animals", "objects"],
        "knob": ["color", "material", "pose"],
        "t2i": ["flux", "sana"],
        "subcategory": ["birds", "cats", "tools"],
    }
    assert clip.loc[("overall", "all"), ["n", "accuracy", "n_unscored"]].tolist() == [6, 2 / 6, 2]
    assert clip.loc[("domain", "animals"), ["n", "accuracy"]].tolist() == [3, 1 / 3]  # p1 right, p2 tie, p3 NaN
    assert clip.loc[("domain", "objects"), ["n", "accuracy"]].tolist() == [3, 1 / 3]  # p4 right, p5 wrong, p6 missing
    assert clip.loc[("knob", "color"), ["n", "accuracy"]].tolist() == [4, 2 / 4]
    assert clip.loc[("t2i", "flux"), ["n", "accuracy"]].tolist() == [3, 2 / 3]
    assert clip.loc[("subcategory", "tools"), "n"] == 3
    # cats has one pair, one triplet: one cluster shows no spread, so it has no interval (nor has a group of one
    # triplet); the groups of several have one around their accuracy
    assert clip.loc[("subcategory", "cats"), "n"] == 1
    assert clip.loc[("subcategory", "cats"), ["accuracy_low", "accuracy_high"]].isna().all()
    spread = clip.dropna(subset=["accuracy_low"])
    assert {("overall", "all"), ("domain", "animals"), ("domain", "objects")} <= set(spread.index)
    assert (spread["accuracy_low"] <= spread["accuracy"]).all()
    assert (spread["accuracy"] <= spread["accuracy_high"]).all()
    assert out["kappa"].isna().all()  # no human choices
    assert (out["n_kappa"] == 0).all()
    assert list(dict.fromkeys(out["metric"])) == ["clip", "pick"]
    assert list(dict.fromkeys(out["breakdown"])) == ["overall", "domain", "knob", "t2i", "subcategory"]
    pick = out[out["metric"] == "pick"]
    assert (pick["accuracy"] == 1).all()
    assert (pick["accuracy_low"].dropna() == 1).all()  # a group of one pair has no interval
    # Seeded per cell: the same numbers whatever else is evaluated.
    alone = accuracy_breakdown(scores(), bench(), ["clip"], n_boot=200)
    pd.testing.assert_frame_equal(alone, out[out["metric"] == "clip"].reset_index(drop=True))


def test_breakdown_with_humans_adds_kappa_and_the_human_row():
    out = accuracy_breakdown(scores(), bench(), ["clip", "pick"], humans(), breakdowns=["overall", "domain"])
    assert set(out["population"]) == {"test split"}
    row = out.set_index(["metric", "breakdown", "group"])
    # On every annotated pair (p1-p5), the metric's choice against whether the majority prefers I_corr:
    # clip [1, 0, 0, 1, 0] (p2 tie, p3 NaN, p5 wrong) against humans [1, 0, 1, 1, 0] (p5 `neither`: not I_corr).
    clip = row.loc[("clip", "overall", "all")]
    assert clip["n_kappa"] == 5
    assert clip["kappa"] == pytest.approx(cohen_kappa_score([1, 0, 0, 1, 0], [1, 0, 1, 1, 0]))
    assert clip["kappa"] == pytest.approx((4 / 5 - 0.48) / (1 - 0.48))  # p_e = 2/5 * 3/5 + 3/5 * 2/5
    assert clip["n"] == 6  # accuracy stays on every test pair
    assert row.loc[("pick", "overall", "all"), "kappa"] == 0  # a constant choice agrees only by chance
    human = row.loc[(HUMAN, "overall", "all")]
    assert human[["n", "accuracy"]].tolist() == [5, 3 / 5]
    assert np.isnan(human["kappa"])
    assert row.loc[(HUMAN, "domain", "objects"), "n"] == 2
    assert out["metric"].iloc[0] == HUMAN
    only = accuracy_breakdown(scores(), bench(), ["clip"], humans(), annotated_only=True, breakdowns=["overall"])
    assert only.set_index("metric").loc["clip", ["n", "accuracy"]].tolist() == [5, 2 / 5]  # p6 unannotated
    assert set(only["population"]) == {"annotated"}
    with pytest.raises(ValueError, match="not test pairs"):
        accuracy_breakdown(scores(), bench(), humans=pd.DataFrame({"pair_id": ["p0"], "choice": ["corr"]}))
    with pytest.raises(ValueError, match="needs human choices"):
        accuracy_breakdown(scores(), bench(), annotated_only=True)


def test_table3_layout_and_files(tmp_path):
    out = accuracy_breakdown(scores(), bench(), ["clip", "pick"], humans(), breakdowns=["overall", "domain"])
    table = table3(out, METRICS, domains=["animals", "objects"])
    values = ["Animals κ", "Animals Acc.", "Objects κ", "Objects Acc.", "Overall κ", "Overall Acc."]
    assert list(table.columns) == ["Method", *(f"{v}{bound}" for v in values for bound in ("", "_low", "_high"))]
    # blip has no scores: left out
    assert table["Method"].tolist() == [
        HUMAN_FAMILY,
        "Human",
        "Embedding-based text-image metrics",
        "CLIPScore",
        "Human-feedback-based reward metrics",
        "PickScore",
    ]
    assert (table.iloc[[0, 2, 4], 1:] == "").all().all()
    clip = table.set_index("Method").loc["CLIPScore"]
    assert clip["Animals Acc."] == pytest.approx(1 / 3)
    assert clip["Objects Acc."] == pytest.approx(1 / 3)
    assert clip["Overall Acc."] == pytest.approx(2 / 6)
    overall = out.query("metric == 'clip' and breakdown == 'overall'").iloc[0]
    assert (clip["Overall Acc._low"], clip["Overall Acc._high"]) == (overall["accuracy_low"], overall["accuracy_high"])
    assert clip["Overall Acc._low"] <= clip["Overall Acc."] <= clip["Overall Acc._high"]
    assert clip["Overall κ"] == pytest.approx(cohen_kappa_score([1, 0, 0, 1, 0], [1, 0, 1, 1, 0]))
    assert table.set_index("Method").loc["Human", "Animals Acc."] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="no family and label"):
        table3(out, {"clip": METRICS["clip"]})
    agreeing = with_human_kappa(table, {"animals": {"kappa": 0.5}, "overall": {"kappa": 0.25}}, ["animals", "objects"])
    human = agreeing.set_index("Method").loc["Human"]
    assert (human["Animals κ"], human["Overall κ"]) == (0.5, 0.25)
    assert np.isnan(human["Objects κ"])  # no annotated pairs there
    assert human["Animals Acc."] == pytest.approx(2 / 3)
    assert agreeing.drop(index=1).equals(table.drop(index=1))
    with pytest.raises(ValueError, match="0 'Human' rows"):
        with_human_kappa(table3(out.query("metric != 'human'"), METRICS), {}, ["animals"])

    paths = {kind: tmp_path / f"table3.{kind}" for kind in ("csv", "md", "tex")}
    write_table3(table, paths["csv"], paths["md"], paths["tex"], table3_caption(5, human_kappa=False))
    write_breakdown(out, tmp_path / "breakdown.csv")
    csv = pd.read_csv(paths["csv"])
    assert csv["Method"].tolist() == table["Method"].tolist()
    assert csv.loc[3, "Overall Acc."] == pytest.approx(2 / 6, abs=1e-12)  # full precision
    markdown = paths["md"].read_text()
    assert "| Method | Animals κ | Animals Acc." in markdown
    assert "_low" not in markdown
    half = (clip["Overall Acc._high"] - clip["Overall Acc._low"]) / 2
    assert f"| CLIPScore | 0.400 ± {(clip['Animals κ_high'] - clip['Animals κ_low']) / 2:.3f} |" in markdown
    assert f"0.333 ± {half:.3f} |\n" in markdown
    assert markdown.startswith("Table 3: main results on the 5 human-annotated test pairs")
    # animals [1, 0, 0] against [1, 0, 1]; objects p4, p5 annotated, both agree; overall as above
    assert "| PickScore | 0.000 ± 0.000 | 1.000 ± 0.000 |" in markdown
    latex = paths["tex"].read_text()
    assert r"Animals $\kappa$" in latex
    assert "κ" not in latex
    assert r"\begin{tabular}" in latex
    long = pd.read_csv(tmp_path / "breakdown.csv")
    assert list(long.columns) == BREAKDOWN_COLUMNS
    assert len(long) == len(out)


def test_accuracy_bar_chart_png(tmp_path):
    out = accuracy_breakdown(scores(), bench(), ["clip", "pick"], breakdowns=["overall", "domain"], n_boot=200)
    path = tmp_path / "figures" / "accuracy.png"
    plot_accuracy(out, METRICS, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        width, height = image.size
    assert 600 <= width <= 3000
    assert 300 <= height <= 1500
    assert [p.name for p in path.parent.iterdir()] == ["accuracy.png"]  # no temp file left


def with_schema(frame: pd.DataFrame, schema: pa.Schema) -> pd.DataFrame:
    """`frame` with the schema's other columns filled with empty values, to write a table the steps read."""
    empty = {pa.string(): "", pa.int64(): 0, pa.float64(): 0.0}
    return frame.assign(**{f.name: empty[f.type] for f in schema if f.name not in frame.columns})


def table3_inputs(folder) -> dict:
    """make_table3's inputs and outputs in `folder`: the six test pairs and one train pair of `bench()`, and the
    scores of clip and pick; the human choices and the Human row's kappa beside them."""
    write_table(folder / "pairs.parquet", with_schema(bench(), schemas.BENCHMARK_PAIRS), schemas.BENCHMARK_PAIRS)
    for metric, frame in scores().groupby("metric"):
        write_table(folder / f"{metric}.parquet", frame, schemas.METRIC_SCORES)
    humans().to_csv(folder / "humans.csv", index=False)
    (folder / "row.json").write_text(json.dumps({"animals": {"kappa": 0.7}, "overall": {"kappa": 0.6}}))
    return {
        "scores": [str(folder / "clip.parquet"), str(folder / "pick.parquet")],
        "benchmark": str(folder / "pairs.parquet"),
        **{kind: str(folder / f"table3.{ext}") for kind, ext in (("csv", "csv"), ("markdown", "md"), ("latex", "tex"))},
        "breakdown": str(folder / "breakdown.csv"),
        "comparisons": [str(folder / "comparisons.csv"), str(folder / "comparisons.md")],
        "plot": str(folder / "accuracy.png"),
        "metrics": METRICS,
        "domains": ["animals", "objects"],
        "annotated_only": [],
        "bootstrap_samples": 200,
        "seed": 0,
        "sample": [],  # the whole dataset, not a sample of it
    }


def test_table3_is_on_the_annotated_pairs_with_labels_and_says_whole_split_without(tmp_path):
    """The paper: "All reported values in Table 3 are computed on the same annotated human-reference subset"."""
    from blindspot.steps.table3 import make_table3

    arguments = table3_inputs(tmp_path)
    split = [str(tmp_path / f"split.{ext}") for ext in ("csv", "md", "tex")]
    make_table3(
        human_choices=[str(tmp_path / "humans.csv")],
        human_row=[str(tmp_path / "row.json")],
        test_split=split,
        **arguments,
    )
    table = pd.read_csv(arguments["csv"]).set_index("Method")
    # p1-p5 are annotated, p6 is not: clip is right on p1 and p4 of them
    assert table.loc["CLIPScore", "Overall Acc."] == pytest.approx(2 / 5)
    assert table.loc["CLIPScore", "Objects Acc."] == pytest.approx(1 / 2)
    assert table.loc["CLIPScore", "Overall κ"] == pytest.approx(cohen_kappa_score([1, 0, 0, 1, 0], [1, 0, 1, 1, 0]))
    assert table.loc["Human", ["Overall κ", "Overall Acc.", "Animals κ"]].tolist() == [0.6, 3 / 5, 0.7]
    title = (tmp_path / "table3.md").read_text()
    assert title.startswith("Table 3: main results on the 5 human-annotated test pairs")
    assert "mean pairwise quadratic weighted Cohen's κ among annotators" in title
    whole = pd.read_csv(split[0]).set_index("Method")
    assert [column for column in whole.columns if not column.endswith(("_low", "_high"))] == [
        "Animals Acc.",
        "Objects Acc.",
        "Overall Acc.",
    ]
    assert "Human" not in whole.index  # people judged only the annotated pairs
    assert whole.loc["CLIPScore", "Overall Acc."] == pytest.approx(2 / 6)
    assert (
        (tmp_path / "split.md")
        .read_text()
        .startswith(
            "Pairwise accuracy on the whole test split (6 pairs); Table 3's population is the 5 human-annotated pairs"
        )
    )
    assert r"\caption{Pairwise accuracy on the whole test split" in (tmp_path / "split.tex").read_text()
    long = pd.read_csv(arguments["breakdown"])
    counts = long[(long["metric"] == "clip") & (long["breakdown"] == "overall")].set_index("population")["n"]
    assert counts.to_dict() == {"annotated": 5, "test split": 6}
    # every two of Human, CLIPScore and PickScore on the 5 annotated pairs, each pair of systems once
    compared = pd.read_csv(arguments["comparisons"][0]).set_index(["a", "b"])
    assert list(compared.index) == [("human", "clip"), ("human", "pick"), ("clip", "pick")]
    assert set(compared["population"]) == {"annotated"}
    # clip has no score for p3: its comparisons are on the other 4, where it is right on p1 and p4, pick on all
    assert compared["n"].tolist() == [4, 5, 4]
    clip_pick = compared.loc[("clip", "pick")]
    assert (clip_pick["accuracy_a"], clip_pick["accuracy_b"], clip_pick["a_only"], clip_pick["b_only"]) == (
        0.5,
        1,
        0,
        2,
    )
    assert clip_pick["p_mcnemar"] == pytest.approx(0.5)  # 2 discordant pairs, both pick's: 2 x (1/2)^2
    assert (compared["p_holm"] >= compared["p_mcnemar"]).all()
    markdown = Path(arguments["comparisons"][1]).read_text()
    assert markdown.startswith("Every two metrics on the annotated pairs both scored")
    assert "| CLIPScore | PickScore | 4 | 50.0 | 100.0 |" in markdown
    # five pairs settle nothing: every column's best is marked
    assert "†" in (tmp_path / "table3.md").read_text().split("\n\n", 1)[1]

    make_table3(human_choices=[], human_row=[], test_split=[], **arguments)
    table = pd.read_csv(arguments["csv"]).set_index("Method")
    values = ["Animals Acc.", "Objects Acc.", "Overall Acc."]  # no κ without human choices
    assert list(table.columns) == [f"{v}{bound}" for v in values for bound in ("", "_low", "_high")]
    assert table.loc["CLIPScore", "Overall Acc."] == pytest.approx(2 / 6)
    title = (tmp_path / "table3.md").read_text().split("\n\n")[0]
    assert title.startswith("Pairwise accuracy on the whole test split (6 pairs); not Table 3's population")
    assert "κ needs human pairwise labels" in title
    assert set(pd.read_csv(arguments["breakdown"])["population"]) == {"test split"}
    with pytest.raises(ValueError, match="whole-split table"):
        make_table3(human_choices=[str(tmp_path / "humans.csv")], human_row=[], test_split=[], **arguments)


def test_table_3s_population_rules_are_the_benchmarks_and_the_step_only_reads_and_writes(tmp_path):
    """`protobias.table3.write_report` holds which pairs Table 3 covers; `make_table3` reads its files into it,
    so both write the same bytes."""
    from blindspot.protobias import accuracy, table3
    from blindspot.steps.table3 import make_table3

    step, direct = tmp_path / "step", tmp_path / "direct"
    step.mkdir(), direct.mkdir()
    arguments = table3_inputs(step)
    split = [str(step / f"split.{ext}") for ext in ("csv", "md", "tex")]
    make_table3(
        human_choices=[str(step / "humans.csv")], human_row=[str(step / "row.json")], test_split=split, **arguments
    )
    files = table3_inputs(direct)
    title = table3.write_report(
        accuracy.read_scores(files["scores"]),
        read_table(files["benchmark"], schemas.BENCHMARK_PAIRS),
        accuracy.read_human_choices(str(direct / "humans.csv")),
        json.loads((direct / "row.json").read_text()),
        METRICS,
        ["animals", "objects"],
        [],
        [files[kind] for kind in ("csv", "markdown", "latex")],
        [str(direct / f"split.{ext}") for ext in ("csv", "md", "tex")],
        files["breakdown"],
        files["plot"],
        {"n_boot": 200, "seed": 0},
    )
    assert title == "Pairwise accuracy on the 5 human-annotated test pairs (95% CI)"
    for name in ("table3.csv", "table3.md", "table3.tex", "split.csv", "split.md", "breakdown.csv", "accuracy.png"):
        assert (step / name).read_bytes() == (direct / name).read_bytes(), name


def test_a_metric_scored_on_the_annotated_pairs_only_is_marked_in_the_whole_split_table_never_failed(tmp_path):
    """An API metric scores only the annotated pairs by default (evaluation.api_metrics_score): Table 3 reads
    it as any metric; the whole-split table shows it on the pairs it scored, its label saying how many, and
    never counts the pairs it was not asked about as failures."""
    from blindspot.steps.table3 import make_table3

    arguments = table3_inputs(tmp_path)
    # scored on the five annotated pairs p1-p5 only, right on four of them
    judge = {"p1": (0.9, 0.1), "p2": (0.8, 0.1), "p3": (0.1, 0.9), "p4": (0.7, 0.2), "p5": (0.6, 0.5)}
    write_table(tmp_path / "gpt.parquet", pd.DataFrame(score_rows("gpt", judge)), schemas.METRIC_SCORES)
    arguments |= {
        "scores": [*arguments["scores"], str(tmp_path / "gpt.parquet")],
        "metrics": METRICS | {"gpt": {"family": "VLM-as-judge baselines", "label": "GPT-5"}},
        "annotated_only": ["gpt"],
    }
    split = [str(tmp_path / f"split.{ext}") for ext in ("csv", "md", "tex")]
    make_table3(human_choices=[str(tmp_path / "humans.csv")], human_row=[], test_split=split, **arguments)
    table = pd.read_csv(arguments["csv"]).set_index("Method")
    assert table.loc["GPT-5", "Overall Acc."] == pytest.approx(4 / 5)  # Table 3: the annotated pairs, as any metric
    assert table.loc["CLIPScore", "Overall Acc."] == pytest.approx(2 / 5)
    whole = pd.read_csv(split[0]).set_index("Method")
    assert "GPT-5" not in whole.index
    assert whole.loc["GPT-5 (5 annotated pairs)", "Overall Acc."] == pytest.approx(4 / 5)  # not 4 / 6
    assert whole.loc["GPT-5 (5 annotated pairs)", "Objects Acc."] == pytest.approx(2 / 2)  # p4 and p5; p6 unasked
    assert whole.loc["CLIPScore", "Overall Acc."] == pytest.approx(2 / 6)
    assert "scored on the annotated test pairs only" in (tmp_path / "split.md").read_text().split("\n\n")[0]
    long = pd.read_csv(arguments["breakdown"])
    counts = long[(long["metric"] == "gpt") & (long["breakdown"] == "overall")].set_index("population")["n"]
    assert counts.to_dict() == {"annotated": 5, "scored pairs only": 5}  # no "test split" row of 6
    assert long.loc[long["metric"] == "gpt", "n_unscored"].eq(0).all()

    make_table3(human_choices=[], human_row=[], test_split=[], **arguments)  # Table 3 is the whole split's
    table = pd.read_csv(arguments["csv"]).set_index("Method")
    assert table.loc["GPT-5 (5 annotated pairs)", "Overall Acc."] == pytest.approx(4 / 5)
    assert table.loc["CLIPScore", "Overall Acc."] == pytest.approx(2 / 6)
    title = (tmp_path / "table3.md").read_text().split("\n\n")[0]
    assert title.startswith("Pairwise accuracy on the whole test split (6 pairs)")
    assert "A row marked '(n annotated pairs)' is an API metric scored on the annotated test pairs only" in title
    assert set(pd.read_csv(arguments["breakdown"])["population"]) == {"test split", "scored pairs only"}


def test_a_benchmark_without_a_test_pair_is_one_line_not_a_key_error():
    """A small run whose kept seeds all drew train had every metric score nothing, then Table 3 failed on a
    KeyError deep in pandas."""
    train_only = bench().assign(split="train")
    with pytest.raises(ValueError, match=r"^the benchmark has no test pair \(of \d+ kept pairs\)"):
        pairwise_outcomes(scores().iloc[:0], train_only)
