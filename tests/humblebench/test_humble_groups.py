"""HumbleBench's Tables 4 and 6 group the models as the paper does (general-purpose, reasoning,
proprietary: each registry entry's `group`) and set each group's best value in bold."""

import math

import pandas as pd
import yaml
from helpers.humble import SETTINGS, answers, make_tables, write_answers
from helpers.workflow import REPO

from blindspot.humblebench.tables import OTHER_GROUP, best_cells, grouped, metrics_table, table4, table6
from blindspot.registry import MODEL_GROUPS
from blindspot.reporting import to_latex, to_markdown


def three_models() -> pd.DataFrame:
    """vlm-a and vlm-b as in test_humble_report, and vlm-c answering as vlm-a does."""
    frame = answers()
    return pd.concat([frame, frame[frame["vlm"] == "vlm-a"].assign(vlm="vlm-c", model_id="vlm-c")], ignore_index=True)


def test_table4_lists_the_models_under_their_groups_headings_in_the_papers_order():
    found = metrics_table(three_models())
    flat = table4(found, "text", "original").set_index("Model")
    table = table4(found, "text", "original", {"vlm-a": "reasoning", "vlm-b": None, "vlm-c": "general"})
    headings = ["General-purpose models", "vlm-c", "Reasoning models", "vlm-a", OTHER_GROUP, "vlm-b"]
    assert list(table["Model"]) == headings
    headings = table[table["Model"].isin([*MODEL_GROUPS.values(), OTHER_GROUP])]
    assert (headings.drop(columns="Model") == "").all().all()
    for model in ("vlm-a", "vlm-b", "vlm-c"):
        row = table[table["Model"] == model].iloc[0].drop("Model")
        assert row.astype(float).equals(flat.loc[model].astype(float))


def test_without_groups_the_tables_are_as_they_were():
    found = metrics_table(three_models())
    flat = table6(found, "text", SETTINGS)
    for groups in (None, {}, {"vlm-a": None}):
        pd.testing.assert_frame_equal(table6(found, "text", SETTINGS, groups), flat)
        pd.testing.assert_frame_equal(grouped(flat, groups), flat)


def test_the_best_of_each_group_is_marked_ties_all_and_false_nota_lowest():
    table = pd.DataFrame(
        [
            ["General-purpose models", "", ""],
            ["m1", 50.0, 10.0],
            ["m2", 60.0, 10.0],
            ["m3", 60.0, 30.0],
            ["Reasoning models", "", ""],
            ["m4", 40.0, math.nan],
            ["m5", math.nan, 5.0],
        ],
        columns=["Model", "Overall", "False-NOTA"],
        dtype=object,
    )
    assert best_cells(table) == {
        (2, "Overall"),
        (3, "Overall"),
        (1, "False-NOTA"),
        (2, "False-NOTA"),  # a tie: both
        (5, "Overall"),
        (6, "False-NOTA"),  # the other group's own best, a missing value never
    }
    ungrouped = pd.DataFrame({"Model": ["m1", "m2"], "Overall": [1.0, 2.0], "False-NOTA": [3.0, 4.0]})
    assert best_cells(ungrouped) == {(1, "Overall"), (0, "False-NOTA")}
    markdown = to_markdown(table, decimals=2, bold=best_cells(table))
    assert "| m2 | **60** | **10** |" in markdown
    assert "| Reasoning models |  |  |" in markdown
    assert r"m3 & \textbf{60} & 30 \\" in to_latex(table, "caption", decimals=2, bold=best_cells(table))


def test_the_step_writes_grouped_tables_with_each_groups_best_in_bold_and_plain_csv(tmp_path):
    frame = three_models()
    groups = {"vlm-a": "general", "vlm-b": "general", "vlm-c": "reasoning"}
    make_tables(tmp_path, write_answers(tmp_path, frame), humans=False, groups=groups)
    table = pd.read_csv(tmp_path / "t4.csv", keep_default_na=False)
    assert list(table["Model"]) == ["General-purpose models", "vlm-a", "vlm-b", "Reasoning models", "vlm-c"]
    assert "**" not in (tmp_path / "t4.csv").read_text()
    markdown = (tmp_path / "t4.md").read_text()
    assert markdown.startswith(
        "Table 4: the Original setting (text reading, official protocol), %; bold: the best in each model group"
    )
    overall = table4(metrics_table(frame), "text", "original").set_index("Model")["Overall"]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[4] for line in markdown.splitlines()[4:]}  # Model: Overall
    shown = {model: str(int(v)) if float(v).is_integer() else f"{v:.3f}" for model, v in overall.items()}
    winner = overall[["vlm-a", "vlm-b"]].idxmax()
    loser = "vlm-b" if winner == "vlm-a" else "vlm-a"
    assert overall[winner] > overall[loser]
    assert rows[winner] == f"**{shown[winner]}**"
    assert rows[loser] == shown[loser]
    assert rows["vlm-c"] == f"**{shown['vlm-c']}**"  # alone in its group, whatever its value
    assert r"\textbf{" in (tmp_path / "t6.tex").read_text()
    assert "**" not in (tmp_path / "t5.md").read_text()  # Table 5's rows are settings: nothing to mark


def test_the_configs_group_their_humblebench_vlms_and_the_paper_has_the_papers_groups():
    for name in ("config.yaml", "tiny.yaml"):
        config = yaml.safe_load((REPO / "config" / name).read_text())
        groups = [config["models"][vlm].get("group") for vlm in config["humblebench"]["vlms"]]
        assert all(group in MODEL_GROUPS for group in groups), name
        assert {"general", "reasoning"} <= set(groups), name
