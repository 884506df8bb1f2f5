"""Every two VLMs compared, setting by setting, on the questions both answered (`blindspot.comparisons`): the
difference in accuracy with a paired interval that resamples images (each with all of its questions, the
same draws for both), McNemar's exact test on the questions only one got right, and Holm's correction over
the setting's comparisons."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from blindspot.comparisons import COMPARISON_COLUMNS, paired_comparisons, write_comparisons
from blindspot.humblebench.humility import answer_outcomes, image_clusters
from blindspot.io import stable_id


def vlm_comparisons(
    answers: pd.DataFrame, reading: str, images: Mapping[str, str] | None, n_boot: int, seed: int
) -> pd.DataFrame:
    """Per setting, every two VLMs (in the answers' order) on the questions both answered, by `reading`;
    `images`: question_id -> its image (default: each question its own). Columns: `setting` and
    COMPARISON_COLUMNS (a, b: the VLMs)."""
    frames = []
    for setting, part in answers.groupby("setting", sort=False):
        outcomes = answer_outcomes(part.assign(prediction=part[f"prediction_{reading}"]))
        long = pd.DataFrame({"question_id": part["question_id"], "vlm": part["vlm"], "correct": outcomes["correct"]})
        wide = long.pivot(index="question_id", columns="vlm", values="correct")[list(dict.fromkeys(part["vlm"]))]
        clusters = image_clusters(list(wide.index), images)
        rng = np.random.default_rng([seed, int(stable_id("comparisons", setting), 16)])
        compared = paired_comparisons(wide.fillna(False).astype(bool), clusters, n_boot, rng, wide.notna())
        frames.append(compared.assign(setting=setting))
    return pd.concat(frames, ignore_index=True)[["setting", *COMPARISON_COLUMNS]]


def write_vlm_comparisons(compared: pd.DataFrame, files: Sequence[str | Path], sample: str | None = None) -> None:
    """The comparisons as CSV and Markdown (`comparisons.write_comparisons`), under a caption saying what they are."""
    caption = (
        "Every two VLMs per setting on the questions both answered: overall accuracy (%), the difference with its "
        "95% paired bootstrap interval (the same images resampled for both, each with all of its questions), the "
        "questions only A or only B got right, and McNemar's exact test on those, Holm-corrected within the setting."
    )
    write_comparisons(compared, files, caption, sample, items="Questions")
