"""`blindspot view`: a static site of the per-item records with their images, opened from file:// in Chromium."""

import json
import re

import numpy as np
import pandas as pd
import pytest
from helpers.screenshots import SCREENSHOTS, drawn_picture
from helpers.workflow import CHROMIUM
from PIL import Image

from blindspot import schemas
from blindspot.config import ConfigError
from blindspot.humblebench.settings import noise_image, official_noise_image
from blindspot.io import write_records
from blindspot.protobias.records import pair_records
from blindspot.view import build_site, records_files

COLOURS = {"p1": ("red", "blue"), "p2": ("green", "orange"), "p3": ("purple", "black")}


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run's folder: results/tiny/tables/protobias_records.jsonl and humblebench_records.jsonl, their images
    under results/tiny/images by paths relative to the run's folder, as the workflow writes them."""
    monkeypatch.chdir(tmp_path)
    images = tmp_path / "results" / "tiny" / "images"
    pairs = []
    for pair_id, (corr, adv) in COLOURS.items():
        row = dict.fromkeys(schemas.BENCHMARK_PAIRS.names, "")
        drawn_picture(images / f"{pair_id}_corr.png", corr)
        drawn_picture(images / f"{pair_id}_adv.png", adv)
        row |= {"pair_id": pair_id, "split": "test", "knob": "colour" if pair_id != "p3" else "count"}
        row |= {"triplet_id": f"t-{pair_id}", "t2i": "sd3" if pair_id == "p3" else "flux"}
        row |= {"correct_value": corr, "adversarial_value": adv}
        row |= {"correct_description": f"a {corr} square", "adversarial_description": f"a {adv} square"}
        row |= {"domain": "animals", "seed": 1, "min_corr_score": 9.0, "min_adv_score": 9.0}
        row |= {
            "corr_path": f"results/tiny/images/{pair_id}_corr.png",
            "adv_path": f"results/tiny/images/{pair_id}_adv.png",
        }
        pairs.append(row)
    # clip: right on p1, wrong on p2 and p3; pick: right on p1 and p2, unscored on p3
    scores = {
        "clip": {"p1": (0.9, 0.1), "p2": (0.2, 0.8), "p3": (0.4, 0.5)},
        "pick": {"p1": (1, 0), "p2": (1, 0), "p3": (np.nan, 0)},
    }
    rows = [
        dict.fromkeys(schemas.METRIC_SCORES.names, "")
        | {
            "pair_id": p,
            "domain": "animals",
            "metric": m,
            "prompt": f"a {COLOURS[p][0]} square",
            "corr_raw": c,
            "adv_raw": a,
            "corr_score": c,
            "adv_score": a,
        }
        for m, values in scores.items()
        for p, (c, a) in values.items()
    ]
    tables = tmp_path / "results" / "tiny" / "tables"
    records = pair_records(pd.DataFrame(rows, columns=schemas.METRIC_SCORES.names), pd.DataFrame(pairs))
    write_records(tables / "protobias_records.jsonl", records, schemas.PROTOBIAS_RECORDS)
    answers = [
        {
            "vlm": vlm,
            "setting": setting,
            "question_id": "q1",
            "type": "Object",
            "question": "What colour is it?",
            "image": "results/tiny/images/p1_corr.png",
            "noise_image": bool(noise),
            "noise": noise,
            "noise_seed": 7 if noise == "per_question" else None,
            "options": {"A": "red", "B": "blue", "C": "None of the above"},
            "label": "C" if noise else "A",
            "nota": "C",
            "answer": answer,
            "reasoning": "",
            "stopped": True,
            "cut_off": False,
            "letter_probabilities": None,
            "prediction_text": letter,
            "prediction_logits": "A",
            "reading": "text",
            "prediction": letter,
            "correct": outcome == "right",
            "outcome": outcome,
        }
        for vlm, setting, noise, answer, letter, outcome in (
            ("vlm-a", "original", "", "A", "A", "right"),
            ("vlm-b", "original", "", "B.", "B", "wrong"),
            ("vlm-a", "noise", "official", "C", "C", "right"),
            ("vlm-a", "noise_per_question", "per_question", "A", "A", "wrong"),
        )
    ]
    write_records(tables / "humblebench_records.jsonl", pd.DataFrame(answers), schemas.HUMBLE_RECORDS)
    return tmp_path / "results" / "tiny"


def _data(site) -> dict:
    return json.loads(re.fullmatch(r"window\.BLINDSPOT = (.*);\n", (site / "data.js").read_text(), re.S)[1])


def test_the_site_holds_each_pair_and_answer_with_its_images_made_once(run, tmp_path):
    assert [path.name for path in records_files(run)] == ["humblebench_records.jsonl", "protobias_records.jsonl"]
    index = build_site(run, tmp_path / "site")
    assert index.read_text().startswith("<!doctype html>")
    data = _data(tmp_path / "site")
    pairs = {item["pair"]: item for item in data["protobias"]}
    assert set(pairs) == {"p1", "p2", "p3"}
    assert pairs["p3"]["scores"]["pick"]["outcome"] == "unscored"
    assert pairs["p2"]["scores"]["clip"]["margin"] == pytest.approx(-0.6)
    thumb = tmp_path / "site" / pairs["p1"]["corr"]["thumb"]
    full = tmp_path / "site" / pairs["p1"]["corr"]["full"]
    with Image.open(thumb) as small, Image.open(full) as large, Image.open(run / "images" / "p1_corr.png") as source:
        assert max(small.size) <= 256
        assert large.size == source.size  # 200 px: under the full view's 1,024, so as it is
        assert small.getpixel((5, 5))[0] > 200  # red
    assert (pairs["p3"]["t2i"], pairs["p3"]["correct_value"], pairs["p3"]["adversarial_value"]) == (
        "sd3",
        "purple",
        "black",
    )
    assert pairs["p2"]["adversarial_description"] == "a orange square"
    answers = {(item["vlm"], item["setting"]): item for item in data["humblebench"]}
    assert answers["vlm-b", "original"]["outcome"] == "wrong"
    assert answers["vlm-a", "original"]["image"] == pairs["p1"]["corr"]  # one image, made once for both
    assert answers["vlm-a", "original"]["shown"] is None
    # the noise shown, made again as it was drawn: the official image, and the question's from its seed
    official, drawn = answers["vlm-a", "noise"]["shown"], answers["vlm-a", "noise_per_question"]["shown"]
    with Image.open(tmp_path / "site" / official["full"]) as made_official:
        assert made_official.size == official_noise_image().size
    with Image.open(tmp_path / "site" / drawn["full"]) as made_drawn, Image.open(run / "images" / "p1_corr.png") as p1:
        assert made_drawn.size == p1.size
        shown = np.asarray(made_drawn, dtype=float).ravel()

        def correlation(seed):  # a JPEG of noise is near its pixels, not equal to them
            return np.corrcoef(shown, np.asarray(noise_image("q1", seed, p1.size), dtype=float).ravel())[0, 1]

        assert correlation(7) > 0.5
        assert abs(correlation(8)) < 0.1
    made = {path: path.stat().st_mtime_ns for path in (tmp_path / "site" / "img").iterdir()}
    assert len(made) == 2 * (6 + 2)
    build_site(run / "tables" / "protobias_records.jsonl", tmp_path / "site")  # a records file alone
    assert {path: path.stat().st_mtime_ns for path in (tmp_path / "site" / "img").iterdir()} == made
    assert not _data(tmp_path / "site")["humblebench"]


def test_a_records_file_written_before_its_added_fields_is_shown_without_them(run, tmp_path):
    """A records file of an earlier version, without the fields added since (`schemas.is_added`), still reads."""
    added = {field.name for field in schemas.PROTOBIAS_RECORDS if schemas.is_added(field)}
    assert {"t2i", "correct_description", "triplet_id"} <= added
    old = tmp_path / "old_protobias_records.jsonl"
    lines = (run / "tables" / "protobias_records.jsonl").read_text().splitlines()
    old.write_text(
        "".join(json.dumps({k: v for k, v in json.loads(line).items() if k not in added}) + "\n" for line in lines)
    )
    build_site(old, tmp_path / "site")
    pairs = {item["pair"]: item for item in _data(tmp_path / "site")["protobias"]}
    assert (pairs["p1"]["t2i"], pairs["p1"]["correct_description"], pairs["p1"]["knob"]) == ("", "", "colour")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({k: v for k, v in json.loads(lines[0]).items() if k != "knob"}) + "\n")
    with pytest.raises(ConfigError, match="lacks the field"):  # a field of the first version is still required
        build_site(bad, tmp_path / "site")


def test_a_folder_without_records_or_an_image_that_is_gone_is_said(run, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"^view .*empty: no per-item records"):
        records_files(tmp_path / "empty")
    (run / "images" / "p2_adv.png").unlink()
    build_site(run, tmp_path / "site")
    pairs = {item["pair"]: item for item in _data(tmp_path / "site")["protobias"]}
    assert pairs["p2"]["adv"] is None
    assert pairs["p2"]["corr"] is not None


@pytest.mark.browser
@pytest.mark.slow
def test_in_chromium_the_images_load_and_the_filters_pick_the_items(run, tmp_path):
    from playwright.sync_api import sync_playwright

    index = build_site(run, tmp_path / "site")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(index.resolve().as_uri())  # file://: no server, no network
        assert page.inner_text("#count") == "3 pairs"
        widths = page.eval_on_selector_all(".item img", "imgs => imgs.map(i => i.complete && i.naturalWidth)")
        assert len(widths) == 6
        assert all(widths)
        page.select_option("#metric", "clip")
        page.select_option("#outcome", "wrong")
        assert page.inner_text("#count") == "2 pairs"
        assert page.eval_on_selector_all(".item", "items => items.map(i => i.dataset.pair)") == ["p2", "p3"]
        page.select_option("#outcome", "")
        page.select_option("#metric", "")
        page.select_option("#a", "pick")  # pick right, clip wrong
        page.select_option("#b", "clip")
        assert page.eval_on_selector_all(".item", "items => items.map(i => i.dataset.pair)") == ["p2"]
        assert "D_a: a orange square" in page.inner_text("#list")
        assert "colour: green → orange" in page.inner_text("#list")
        page.select_option("#a", "")
        page.select_option("#b", "")
        page.select_option("#t2i", "sd3")
        assert page.eval_on_selector_all(".item", "items => items.map(i => i.dataset.pair)") == ["p3"]
        page.select_option("#t2i", "")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "view_protobias.png"), full_page=True)
        page.click(".item img")
        assert page.eval_on_selector("#zoom img", "img => img.src").endswith(".jpg")
        page.click("#zoom")
        page.click("button[data-tab=humblebench]")
        assert page.inner_text("#count") == "4 answers"
        page.select_option("#setting", "noise_per_question")
        assert "per_question noise shown instead of the image" in page.inner_text("#list")
        widths = page.eval_on_selector_all(".item img", "imgs => imgs.map(i => i.complete && i.naturalWidth)")
        assert len(widths) == 2  # the noise shown, and the image it replaced
        assert all(widths)
        page.select_option("#setting", "")
        page.select_option("#outcome", "wrong")
        assert "vlm-b" in page.inner_text("#list")
        assert page.inner_text("#count") == "2 answers"
        page.screenshot(path=str(SCREENSHOTS / "view_humblebench.png"), full_page=True)
        browser.close()
