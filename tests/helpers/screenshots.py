"""What the `browser` tests that photograph the annotation tasks share: the folder their screenshots go
to, pictures a person can tell apart, Chromium, and the checks of what an annotator must see."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
from PIL import Image, ImageDraw, ImageFont

from helpers.workflow import CHROMIUM

# One folder for every task's screenshot, in the built-in page and in Label Studio, to look at after a run.
SCREENSHOTS = Path(os.environ.get("BLINDSPOT_SCREENSHOTS", Path(__file__).parents[1] / "out" / "screenshots"))
PICTURE_SIZE = 200  # pixels: small, but large enough to read the word drawn on it


def drawn_picture(path: Path, colour: str) -> str:
    """A square of `colour` with the colour's name written on it, so a screenshot shows which image is where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", (PICTURE_SIZE, PICTURE_SIZE), colour)
    ImageDraw.Draw(image).text(
        (PICTURE_SIZE / 2, PICTURE_SIZE / 2), colour, fill="white", anchor="mm", font=ImageFont.load_default(40)
    )
    image.save(path)
    return str(path)


def task_tables(images: Path) -> dict[str, pd.DataFrame]:
    """A small table for each task, showing drawn pictures saved under `images`."""
    paths = {colour: drawn_picture(images / f"{colour}.png", colour) for colour in ("red", "blue", "green")}
    return {
        "image_score": pd.DataFrame(
            {"image_id": ["i1"], "path": [paths["red"]], "description": ["a red square with the word red on it"]}
        ),
        "pairwise": pd.DataFrame(
            {
                "pair_id": ["p1"],
                "neutral_prompt": ["a blue square"],
                "left_role": ["adv"],
                "left_path": [paths["red"]],
                "right_path": [paths["blue"]],
            }
        ),
        "question_check": pd.DataFrame(
            {
                "question_id": ["q1"],
                "image_path": [paths["green"]],
                "question": ["What colour is the square?"],
                "label": ["A"],
                "options": ['["green", "red", "blue", "None of the above"]'],
            }
        ),
        # HumbleBench's human study: a stress question as NOTA-only shows it (its answer, B, removed)
        "humble_answer": pd.DataFrame(
            {
                "item_id": ["nota_only:q1"],
                "annotator": ["alice"],
                "image_path": [paths["green"]],
                "question": ["What colour is the square?"],
                "options": ['["red", "blue", "None of the above"]'],
                "letters": ["ACE"],
            }
        ),
    }


@contextmanager
def chromium_page() -> Iterator:
    """A page of headless Chromium (Debian's), large enough for a task without scrolling."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            browser.close()


def loaded_width(image) -> int:
    """The natural width of an image element once it has loaded (0 when it failed to load)."""
    image.wait_for(state="visible")
    return image.evaluate("img => img.decode().then(() => img.naturalWidth, () => 0)")


def assert_side_by_side(left: dict, right: dict) -> None:
    """Two images' boxes (x, y, width, height): the left wholly left of the right, on the same line, both
    shown at a size a person can judge."""
    assert left["x"] + left["width"] <= right["x"], (left, right)
    assert abs(left["y"] - right["y"]) < 5, (left, right)
    assert min(left["width"], right["width"]) > 50, (left, right)  # shown, not shrunk to a thumbnail


def save_screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
