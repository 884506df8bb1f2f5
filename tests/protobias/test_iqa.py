import dataclasses

import numpy as np
import pandas as pd
import pytest

from blindspot.models.spec import model_spec
from blindspot.protobias.iqa import PyiqaMetric, measure_pairs, table2, weights_file


def quality(metric, higher, corr, adv):
    return pd.DataFrame(
        {
            "pair_id": [f"p{i}" for i in range(len(corr))],
            "t2i": "flux",
            "metric": metric,
            "higher_is_better": higher,
            "corr_score": corr,
            "adv_score": adv,
        }
    )


def test_table2_means_difference_and_share_where_corr_is_better():
    frame = pd.concat(
        [
            quality("musiq", True, [70.0, 80.0, 60.0, 50.0], [72.0, 76.0, 60.0, 40.0]),
            quality("niqe", False, [5.0, 4.0], [4.0, 4.5]),
        ]
    )
    table = table2(frame, labels={"musiq": "MUSIQ"}).set_index("Metric")
    musiq = table.loc["MUSIQ (higher is better)"]
    assert musiq["Mean I_corr"] == pytest.approx(65.0)
    assert musiq["Mean I_adv"] == pytest.approx(62.0)
    assert musiq["Delta"] == pytest.approx(3.0)
    assert musiq["I_corr better (%)"] == pytest.approx(50.0)  # a tie is not better
    niqe = table.loc["niqe (lower is better)"]
    assert niqe["I_corr better (%)"] == pytest.approx(50.0)  # lower wins for NIQE
    assert niqe["Pairs"] == 2


@pytest.mark.slow
def test_real_niqe_parameters_rank_noise_below_a_smooth_image(built_config, tmp_path):
    from PIL import Image
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(0)
    smooth = gaussian_filter(rng.random((128, 128, 3)), sigma=(4, 4, 0))
    smooth = (255 * (smooth - smooth.min()) / np.ptp(smooth)).astype(np.uint8)
    noise = (255 * rng.random((128, 128, 3))).astype(np.uint8)
    paths = {}
    for name, pixels in (("smooth", smooth), ("noise", noise)):
        paths[name] = str(tmp_path / f"{name}.png")
        Image.fromarray(pixels).save(paths[name])
    pairs = pd.DataFrame({"pair_id": ["p"], "t2i": ["x"], "corr_path": [paths["smooth"]], "adv_path": [paths["noise"]]})
    niqe = PyiqaMetric(model_spec(built_config, "niqe"), batch_size=2)
    assert not niqe.higher_is_better
    row = measure_pairs(pairs, niqe, tmp_path / "niqe.jsonl").iloc[0]
    assert row["corr_score"] < row["adv_score"]  # noise is far from natural-scene statistics
    musiq = PyiqaMetric(model_spec(built_config, "tiny-musiq"), batch_size=2)
    scores = measure_pairs(pairs, musiq, tmp_path / "musiq.jsonl")
    assert np.isfinite(scores[["corr_score", "adv_score"]].to_numpy()).all()


@pytest.mark.slow
def test_a_killed_quality_job_scores_only_the_batches_it_had_not_finished(built_config, tmp_path):
    from PIL import Image

    rng = np.random.default_rng(1)
    paths = []
    for index in range(6):
        paths.append(str(tmp_path / f"{index}.png"))
        Image.fromarray((255 * rng.random((64, 64, 3))).astype(np.uint8)).save(paths[-1])
    pairs = pd.DataFrame({"pair_id": ["p0", "p1", "p2"], "t2i": "x", "corr_path": paths[:3], "adv_path": paths[3:]})
    musiq = PyiqaMetric(model_spec(built_config, "tiny-musiq"), batch_size=2)
    whole = measure_pairs(pairs, musiq, tmp_path / "whole.jsonl")
    metric, scored = musiq.metric, []

    def killed_in_the_second_batch(pixels):
        scored.append(len(pixels))
        if len(scored) == 2:
            raise RuntimeError("the job is killed")
        return metric(pixels)

    musiq.metric = killed_in_the_second_batch
    with pytest.raises(RuntimeError, match="killed"):
        measure_pairs(pairs, musiq, tmp_path / "resumed.jsonl")
    resumed = measure_pairs(pairs, musiq, tmp_path / "resumed.jsonl")
    assert scored == [2, 2, 2, 2]  # the first batch once; then the second and third
    pd.testing.assert_frame_equal(resumed, whole)


def test_weights_file_needs_exactly_one_file(tmp_path, tiny_config):
    spec = dataclasses.replace(model_spec(tiny_config, "niqe"), path=str(tmp_path))
    (tmp_path / ".snakemake_timestamp").write_text("")
    (tmp_path / "a.mat").write_text("")
    assert weights_file(spec) == str(tmp_path / "a.mat")
    (tmp_path / "b.mat").write_text("")
    with pytest.raises(ValueError, match="expected one weights file"):
        weights_file(spec)
    with pytest.raises(FileNotFoundError, match="no weights at"):
        weights_file(dataclasses.replace(spec, path=str(tmp_path / "missing.pth")))
