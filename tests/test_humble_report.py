"""HumbleBench's report (`humble_tables.report_tables`): the metrics, Tables 4 to 6, Table 7 given people's
answers, their captions; and the make_humble_tables step that writes them and the NOTA plot."""

import pandas as pd
import pytest

from blindspot import tables
from blindspot.humblebench.tables import (
    metrics_table,
    read_human_answers,
    report_tables,
    table4,
    table5,
    table6,
    table7,
)
from blindspot.io import write_table

SETTINGS = {
    "original": {"label": "Original", "headline": "overall"},
    "nota_only": {"label": "NOTA-only", "headline": "nota_hit"},
}


def answers() -> pd.DataFrame:
    """Two VLMs, two settings, four questions, in the answer table's columns."""
    rows = []
    for vlm, text, logits in (("vlm-a", "AEEB", "ABEB"), ("vlm-b", "ACE", "AEEA")):
        for setting in SETTINGS:
            for i, question in enumerate(["q1", "q2", "q3", "q4"]):
                label = "E" if setting == "nota_only" or question == "q2" else "A"
                rows.append({
                    "question_id": question, "vlm": vlm, "model_id": vlm, "model_revision": "", "setting": setting,
                    "type": ["Object", "Relation", "Attribute", "Object"][i], "options": "[]", "label": label,
                    "nota": "E", "letter_map": "{}", "noise_image": False, "letter_probabilities": "[]",
                    "letter_mass": 1.0, "prediction_logits": logits[i], "text": text[i:i + 1],
                    "prediction_text": text[i:i + 1], "template_version": "v1",
                })  # fmt: skip
    return pd.DataFrame(rows, columns=tables.HUMBLE_ANSWERS.names)


@pytest.fixture
def humans(tmp_path):
    (tmp_path / "humans.csv").write_text(
        "annotator,question_id,setting,answer\nann1,q1,original,A\nann1,q2,original,E\nann1,q2,nota_only,E\n"
    )
    return read_human_answers(tmp_path / "humans.csv")


def test_the_report_is_each_table_of_the_metrics_with_its_caption(humans):
    found, report = report_tables(answers(), None, "text", SETTINGS, "original", "nota_only")
    pd.testing.assert_frame_equal(found, metrics_table(answers()))
    assert list(report) == ["table4", "table5", "table6"]  # no people's answers: no Table 7
    pd.testing.assert_frame_equal(report["table4"][0], table4(found, "text", "original"))
    pd.testing.assert_frame_equal(report["table5"][0], table5(found, "text", SETTINGS))
    pd.testing.assert_frame_equal(report["table6"][0], table6(found, "text", SETTINGS))
    assert report["table4"][1] == "Table 4: the Original setting (text reading), %"
    assert report["table5"][1] == "Table 5: the settings (text reading), %"
    assert report["table6"][1] == "Table 6: models across settings (text reading), %"
    found, report = report_tables(answers(), humans, "logits", SETTINGS, "nota_only", "original")
    # Table 4 shows the setting named `original`; Table 7 puts people in `original`'s and `stress`'s columns
    assert report["table4"][1] == "Table 4: the NOTA-only setting (logits reading), %"
    pd.testing.assert_frame_equal(report["table4"][0], table4(found, "logits", "nota_only"))
    pd.testing.assert_frame_equal(
        report["table7"][0], table7(answers(), humans, "logits", original="nota_only", stress="original")
    )
    assert report["table7"][1] == "Table 7: humans and models on the same questions, %"


def test_the_step_writes_every_table_and_the_plot(tmp_path, humans):
    from blindspot.steps.humble import make_humble_tables

    frame = answers()
    paths = []
    for vlm, part in frame.groupby("vlm"):
        paths.append(str(tmp_path / f"{vlm}.parquet"))
        write_table(paths[-1], part, tables.HUMBLE_ANSWERS)

    def files(name):
        return [str(tmp_path / f"{name}.{ext}") for ext in ("csv", "md", "tex")]

    make_humble_tables(
        answers=paths, human_answers=[str(tmp_path / "humans.csv")], reading="text", settings=SETTINGS,
        original="original", stress="nota_only", metrics=str(tmp_path / "metrics.csv"), table4=files("t4"),
        table5=files("t5"), table6=files("t6"), table7=files("t7"), plot=str(tmp_path / "nota.png"),
    )  # fmt: skip
    found, report = report_tables(frame, humans, "text", SETTINGS, "original", "nota_only")
    assert (tmp_path / "metrics.csv").read_text() == found.to_csv(index=False)
    for name, short in (("table4", "t4"), ("table5", "t5"), ("table6", "t6"), ("table7", "t7")):
        assert (tmp_path / f"{short}.csv").read_text() == report[name][0].to_csv(index=False)
        assert (tmp_path / f"{short}.md").read_text().startswith(report[name][1])
    assert (tmp_path / "nota.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
