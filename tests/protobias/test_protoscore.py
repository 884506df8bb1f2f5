"""ProtoScore: the ranking loss and the score head, training that learns a learnable difference on a
tiny Qwen3-VL, and a resumed run that ends with the weights of an uninterrupted one."""

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.unreadable_csvs import UNREADABLE_CSVS, assert_one_line_error
from PIL import Image

from blindspot.images import OutOfMemory
from blindspot.io import remove_temps_in, temp_target
from blindspot.metrics.protoscore import ProtoScore
from blindspot.models.protoscore_model import TrainSettings, load_scorer
from blindspot.models.spec import model_spec
from blindspot.plugins import normalise
from blindspot.protobias.protoscore import (
    latest_checkpoint,
    pairwise_accuracy,
    ranking_loss,
    read_transfer_pairs,
    split_heldout,
    train,
    transfer_accuracy,
)


def test_the_ranking_loss_at_known_inputs_and_its_gradient_signs():
    import torch

    s_corr = torch.tensor([0.0, 2.0, -1.0], requires_grad=True)
    s_adv = torch.tensor([0.0, 0.0, 1.0], requires_grad=True)
    loss = ranking_loss(s_corr, s_adv, margin=0.5)
    expected = np.mean([math.log1p(math.exp(0.5)), math.log1p(math.exp(-1.5)), math.log1p(math.exp(2.5))])
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    assert (s_corr.grad < 0).all()  # raising s(T, I_corr) lowers the loss
    assert (s_adv.grad > 0).all()
    assert torch.allclose(s_corr.grad, -s_adv.grad)
    # well past the margin the loss vanishes; a tie still costs softplus(margin)
    assert ranking_loss(torch.tensor([20.0]), torch.tensor([0.0]), 0.5).item() < 1e-8
    assert ranking_loss(torch.tensor([1.0]), torch.tensor([1.0]), 0.5).item() == pytest.approx(
        math.log1p(math.exp(0.5))
    )


def settings(**changes) -> TrainSettings:
    base = {
        "lora_r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "target_modules": ("q_proj", "k_proj", "v_proj", "o_proj"),
        "learning_rate": 1e-3,
        "weight_decay": 0.01,
        "warmup_fraction": 0.03,
        "max_grad_norm": 1.0,
        "precision": "fp32",
        "batch_size": 1,
        "accumulation": 2,
        "image_size": 64,
        "max_text_tokens": 192,
        "epochs": 1,
        "margin": 0.5,
        "heldout_fraction": 0.25,
        "checkpoint_every": 4,
        "seed": 0,
    }
    return TrainSettings(**base | changes)


def synthetic_pairs(folder, n: int, offset: int = 0) -> pd.DataFrame:
    """Pairs whose correct image is reddish and adversarial image bluish, with noise: learnable."""
    rng = np.random.default_rng(offset)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(offset, offset + n):
        for role, colour in (("corr", [200, 40, 40]), ("adv", [40, 40, 200])):
            noise = rng.integers(-30, 30, (32, 32, 3))
            Image.fromarray((np.array(colour) + noise).clip(0, 255).astype(np.uint8)).save(folder / f"{role}{i}.png")
        rows.append(
            {
                "pair_id": f"p{i}",
                "seed_id": f"s{i // 2}",
                "neutral_prompt": f"a photo of thing {i}",
                "corr_path": str(folder / f"corr{i}.png"),
                "adv_path": str(folder / f"adv{i}.png"),
            }
        )
    return pd.DataFrame(rows)


def test_the_held_out_slice_is_stable_about_its_share_and_keeps_seeds_whole():
    pairs = pd.DataFrame({"pair_id": [f"p{i}" for i in range(1200)], "seed_id": [f"s{i // 3}" for i in range(1200)]})
    kept, held = split_heldout(pairs, 0.25, seed=3)
    assert len(kept) + len(held) == 1200
    assert 210 < len(held) < 390
    assert list(split_heldout(pairs, 0.25, seed=3)[1]["pair_id"]) == list(held["pair_id"])
    assert set(kept["seed_id"]).isdisjoint(held["seed_id"])  # a seed's triplets and renders stay on one side
    assert (held.groupby("seed_id").size() == 3).all()


@pytest.mark.slow
def test_the_score_is_the_head_on_the_last_tokens_hidden_state(built_config):
    import torch

    scorer = load_scorer(model_spec(built_config, "tiny-qwen3-vl"), settings())
    scorer.model.eval()
    prompts = ["a red fox", "two cats asleep on a long blue sofa in the afternoon sun"]
    pictures = [Image.new("RGB", (40, 40), "red"), Image.new("RGB", (40, 40), "blue")]
    with torch.inference_mode():
        together = scorer.scores(prompts, pictures)
        for prompt, picture, score in zip(prompts, pictures, together, strict=True):
            inputs = scorer.inputs([prompt], [picture])
            hidden = scorer.model(**inputs, output_hidden_states=True).hidden_states[-1][0, -1]
            assert score.item() == pytest.approx(scorer.head(hidden).item(), abs=1e-4)  # left padding is harmless
    assert scorer.prompt_text("word " * 500).count("word") == 192  # the prompt's token budget


@pytest.mark.slow
def test_training_learns_a_learnable_difference(built_config, tmp_path):
    spec = model_spec(built_config, "tiny-qwen3-vl")
    trainset, testset = synthetic_pairs(tmp_path / "train", 32), synthetic_pairs(tmp_path / "test", 16, offset=100)
    before = pairwise_accuracy(load_scorer(spec, settings()), testset, batch_size=4)
    if before > 0.5:  # the untrained model happens to prefer red: teach it blue, so that chance is the start
        swap = {"corr_path": "adv_path", "adv_path": "corr_path"}
        trainset, testset = trainset.rename(columns=swap), testset.rename(columns=swap)
        before = 1 - before
    history = train(load_scorer(spec, settings(epochs=2)), trainset, tmp_path / "out", tmp_path / "checkpoint")
    assert history["loss"].iloc[-3:].mean() < history["loss"].iloc[:3].mean()
    assert history["heldout_accuracy"].dropna().iloc[-1] >= 0.8
    assert {"step", "loss", "learning_rate", "pairs_per_second"} <= set(history.columns)
    assert (tmp_path / "out" / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    trained = load_scorer(spec, settings(), trained=tmp_path / "out")
    after = pairwise_accuracy(trained, testset, batch_size=4)
    assert before <= 0.5
    assert after >= 0.9  # well above chance, from at most chance

    # As a metric plug-in, and on an external pairwise set given as a file with relative paths.
    metric = ProtoScore(spec, batch_size=4, trained=str(tmp_path / "out"))
    with pytest.raises(ValueError, match=r"was trained on built:tiny-qwen3-vl@, not on tiny-qwen2\.5-vl"):
        ProtoScore(model_spec(built_config, "tiny-qwen2.5-vl"), batch_size=4, trained=str(tmp_path / "out"))
    prompts, images = list(testset["neutral_prompt"][:3]), [Image.open(p) for p in testset["corr_path"][:3]]
    expected = trained.scores(prompts, images).tolist()
    assert [s.raw for s in metric.score(prompts, images)] == pytest.approx(expected, abs=1e-5)
    transfer = testset.assign(
        prompt=testset["neutral_prompt"],
        preferred=[f"test/{Path(p).name}" for p in testset["corr_path"]],
        other=[f"test/{Path(p).name}" for p in testset["adv_path"]],
        group=["a", "b"] * 8,
    )[["prompt", "preferred", "other", "group"]]
    transfer.to_csv(tmp_path / "transfer.csv", index=False)

    class Counting:  # the metric, and the most images it was handed at once
        most = 0

        def score(self, prompts, images):
            self.most = max(self.most, len(images))
            return metric.score(prompts, images)

    counting = Counting()
    table = transfer_accuracy(counting, read_transfer_pairs(tmp_path / "transfer.csv"), 500, 0, batch_size=3)
    table = table.set_index("group")
    assert counting.most == 3  # batch by batch, not the whole set
    assert table.loc["overall", "accuracy"] == pytest.approx(after)
    assert table.loc["overall", "pairs"] == 16
    assert table.loc[["a", "b"], "pairs"].tolist() == [8, 8]
    assert table.loc["overall", "accuracy_low"] <= after <= table.loc["overall", "accuracy_high"]


@pytest.mark.slow
def test_a_resumed_run_ends_with_the_uninterrupted_weights(built_config, tmp_path, caplog):
    import torch
    from safetensors.torch import load_file

    spec = model_spec(built_config, "tiny-qwen3-vl")
    pairs = synthetic_pairs(tmp_path / "pairs", 20)
    train(load_scorer(spec, settings()), pairs, tmp_path / "whole", tmp_path / "whole-checkpoint")
    # killed after 6 optimizer steps (its last checkpoint is at step 4), then started again from scratch
    first = train(
        load_scorer(spec, settings()), pairs, tmp_path / "resumed", tmp_path / "checkpoint", stop_after_steps=6
    )
    assert len(first) == 6
    assert not (tmp_path / "resumed").exists()
    assert [p.name for p in (tmp_path / "checkpoint").glob("position-*")] == ["position-000000008"]  # step 4
    history = train(load_scorer(spec, settings()), pairs, tmp_path / "resumed", tmp_path / "checkpoint")
    assert list(history["step"]) == list(range(1, len(history) + 1))
    for name in ("score_head.safetensors", "adapter/adapter_model.safetensors"):
        whole, resumed = load_file(tmp_path / "whole" / name), load_file(tmp_path / "resumed" / name)
        assert whole.keys() == resumed.keys()
        assert all(torch.equal(whole[key], resumed[key]) for key in whole), name
    assert any(
        v.abs().sum() > 0
        for k, v in load_file(tmp_path / "whole" / "adapter/adapter_model.safetensors").items()
        if "lora_B" in k
    )  # training moved the adapters (LoRA's B starts at zero)
    assert not (tmp_path / "checkpoint").exists()  # a finished run leaves no checkpoint behind

    # Killed again, then started on other pairs (the split changed): the checkpoint is not this run's.
    # What an earlier kill left half-written goes first.
    left = leave_half_written_checkpoint(tmp_path / "checkpoint", "position-000000012")
    train(load_scorer(spec, settings()), pairs, tmp_path / "killed", tmp_path / "checkpoint", stop_after_steps=6)
    assert not any(path.exists() for path in left)
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == ["latest", "position-000000008"]
    fewer = pairs.iloc[:12]
    alone = train(load_scorer(spec, settings()), fewer, tmp_path / "fewer-alone", tmp_path / "fewer-checkpoint")
    after_kill = train(load_scorer(spec, settings()), fewer, tmp_path / "fewer", tmp_path / "checkpoint")
    assert "checkpoint of another run" in caplog.text
    pd.testing.assert_frame_equal(after_kill.drop(columns="pairs_per_second"), alone.drop(columns="pairs_per_second"))


def out_of_memory_above(scorer, most: int) -> list[int]:
    """The scorer's real model, whose forward raises torch's OutOfMemoryError on more than `most` pairs while it
    trains (only the error is simulated); the sizes of the training forwards it is given, as they come."""
    import torch

    forward, sizes = scorer.model.forward, []

    def limited(*args, **kwargs):
        if torch.is_grad_enabled():  # training's forward, which keeps its activations for the backward
            sizes.append(len(kwargs["input_ids"]))
            if sizes[-1] > most:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(*args, **kwargs)

    scorer.model.forward = limited
    return sizes


@pytest.mark.slow
def test_micro_batches_that_run_out_of_memory_above_two_pairs_train_in_parts_to_the_same_weights(
    built_config, tmp_path, caplog
):
    """Micro-batches of four, on a model that runs out of memory above two pairs: each is made in halves, with the
    gradients (Adam's first moment after one step, unclipped) and the final adapters and head of a run that fits,
    to float rounding; a checkpoint keeps the size that ran, so a resumed run starts there. (No LoRA dropout: its
    masks are drawn per call.) One pair that does not fit stops the run in one line naming the model, the pair
    and the memory torch asked for."""
    import torch
    from safetensors.torch import load_file

    spec = model_spec(built_config, "tiny-qwen3-vl")
    pairs = synthetic_pairs(tmp_path / "pairs", 8)
    # two optimizer steps at the full learning rate (the second moves LoRA's A, whose gradient is 0 while B is)
    fours = settings(
        batch_size=4,
        lora_dropout=0.0,
        heldout_fraction=0.0,
        epochs=2,
        checkpoint_every=1,
        warmup_fraction=0.0,
        max_grad_norm=1e6,
    )

    def first_moment_after_one_step(scorer, run):
        """Trains one step, stops, and resumes to the end; the optimizer's first moment its checkpoint held."""
        train(scorer, pairs, tmp_path / run, tmp_path / f"{run}-checkpoint", stop_after_steps=1)
        state = torch.load(latest_checkpoint(tmp_path / f"{run}-checkpoint") / "state.pt", weights_only=False)
        train(scorer, pairs, tmp_path / run, tmp_path / f"{run}-checkpoint")
        return [moments["exp_avg"] for _, moments in sorted(state["optimizer"]["state"].items())], state["fits"]

    fits, fits_size = first_moment_after_one_step(load_scorer(spec, fours), "fits")
    scorer = load_scorer(spec, fours)
    sizes = out_of_memory_above(scorer, 2)
    with caplog.at_level("WARNING"):
        halves, halves_size = first_moment_after_one_step(scorer, "halves")
    ran_out = "ProtoScore training of built:tiny-qwen3-vl@: 4 items ran out of GPU memory (CUDA out of memory."
    assert ran_out in caplog.text
    # four micro-batches, each in two halves of two forwards (I_corr's, I_adv's), never four again
    assert sizes == [4] + [2] * 16
    assert (fits_size, halves_size) == (None, 2)
    assert len(fits) == len(halves)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(fits, halves, strict=True))
    for name in ("score_head.safetensors", "adapter/adapter_model.safetensors"):
        fits, halves = load_file(tmp_path / "fits" / name), load_file(tmp_path / "halves" / name)
        assert fits.keys() == halves.keys()
        assert all(torch.allclose(fits[key], halves[key], rtol=1e-4, atol=1e-6) for key in fits), name

    scorer = load_scorer(spec, fours)
    out_of_memory_above(scorer, 0)
    with pytest.raises(OutOfMemory) as error:
        train(scorer, pairs, tmp_path / "none", tmp_path / "none-checkpoint")
    assert re.fullmatch(
        r"ProtoScore training of built:tiny-qwen3-vl@: one item \(p\d\) does not fit in the GPU's memory: "
        r"CUDA out of memory\. Tried to allocate 2\.00 GiB",
        str(error.value),
    )


def test_a_pointer_to_a_removed_checkpoint_is_no_checkpoint(tmp_path):
    """A kill while the checkpoint folders were being removed can leave `latest` naming a folder that is
    gone or half gone: the retry starts afresh instead of failing on every attempt."""
    (tmp_path / "latest").write_text("position-000000050\n")
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / "position-000000050").mkdir()  # its state.pt already removed
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / "position-000000050" / "state.pt").write_bytes(b"state")
    assert latest_checkpoint(tmp_path) == tmp_path / "position-000000050"


def leave_half_written_checkpoint(checkpoint: Path, name: str) -> list[Path]:
    """What a run killed while saving checkpoint `name` leaves: its folder and `latest`, half written, under
    the temporary names atomic_dir and atomic_path give them."""
    folder, pointer = checkpoint / f".{name}.0123abcd.tmp", checkpoint / ".latest.4567cdef.tmp"
    (folder / "adapter").mkdir(parents=True)
    pointer.write_text("position-")
    return [folder, pointer]


def test_what_a_kill_left_half_written_in_the_checkpoint_folder_is_removed_the_rest_kept(tmp_path):
    complete = tmp_path / "position-000000008"
    complete.mkdir()
    (complete / "state.pt").write_bytes(b"state")
    (tmp_path / "latest").write_text(complete.name + "\n")
    (tmp_path / ".notes").write_text("not a temporary")
    left = leave_half_written_checkpoint(tmp_path, "position-000000012")
    assert [temp_target(path.name) for path in left] == ["position-000000012", "latest"]
    assert sorted(remove_temps_in(tmp_path)) == sorted(left)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes", "latest", complete.name]
    assert latest_checkpoint(tmp_path) == complete
    assert remove_temps_in(tmp_path / "absent") == []  # a first run has no checkpoint folder yet


def test_a_logit_is_normalised_with_the_logistic_function():
    assert normalise(0.0, ProtoScore.bounds) == 0.5
    assert normalise(2.0, ProtoScore.bounds) == pytest.approx(1 / (1 + math.exp(-2)))
    assert normalise(-1e6, ProtoScore.bounds) == pytest.approx(0.0)
    assert math.isnan(normalise(math.nan, ProtoScore.bounds))


def test_transfer_pairs_need_their_columns_and_images(tmp_path):
    (tmp_path / "pairs.csv").write_text("prompt,preferred\nx,a.png\n")
    with pytest.raises(ValueError, match=r"lack columns \['other'\]"):
        read_transfer_pairs(tmp_path / "pairs.csv")
    Image.new("RGB", (4, 4)).save(tmp_path / "a.png")
    (tmp_path / "pairs.jsonl").write_text('{"prompt": "x", "preferred": "a.png", "other": "b.png"}\n')
    with pytest.raises(FileNotFoundError, match="1 other image"):
        read_transfer_pairs(tmp_path / "pairs.jsonl")


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        *(pytest.param("pairs.csv", *case.values, id=case.id) for case in UNREADABLE_CSVS),
        pytest.param("pairs.jsonl", b'{"prompt": "x"}\n{"prompt": \n', "line 2 is not JSON", id="jsonl-not-json"),
    ],
)
def test_an_unreadable_transfer_file_is_one_line_naming_it(tmp_path, name, content, problem):
    assert_one_line_error(read_transfer_pairs, tmp_path / name, content, problem)


def dtypes(scorer) -> tuple[set[str], set[str]]:
    """The dtypes of the frozen parameters, and of the trained ones (adapters and head)."""
    parameters = [*scorer.model.parameters(), *scorer.head.parameters()]
    frozen = {str(p.dtype) for p in parameters if not p.requires_grad}
    return frozen, {str(p.dtype) for p in parameters if p.requires_grad}


@pytest.mark.slow
def test_bf16_trains_a_bf16_base_with_float32_adapters_and_head(built_config, tmp_path):
    """The paper's precision: the frozen base in bf16 under bf16 autocast, what is trained in float32;
    fp32 keeps everything in float32."""
    import torch
    from safetensors.torch import load_file

    spec = model_spec(built_config, "tiny-qwen3-vl")
    scorer = load_scorer(spec, settings(precision="bf16"))
    assert dtypes(scorer) == ({"torch.bfloat16"}, {"torch.float32"})
    trained_names = [name for name, p in scorer.model.named_parameters() if p.requires_grad]
    assert trained_names
    assert all("lora_" in name for name in trained_names)  # the base is frozen
    assert dtypes(load_scorer(spec, settings())) == ({"torch.float32"}, {"torch.float32"})
    # the scores are the float32 head's, not rounded to bf16 by the autocast the base runs under
    assert scorer.scores(["a red cube"], [Image.new("RGB", (32, 32), "red")]).dtype == torch.float32
    history = train(scorer, synthetic_pairs(tmp_path / "pairs", 5), tmp_path / "out", tmp_path / "checkpoint")
    assert np.isfinite(history["loss"]).all()
    head = load_file(tmp_path / "out" / "score_head.safetensors")
    assert {str(t.dtype) for t in head.values()} == {"torch.float32"}
    adapter = load_file(tmp_path / "out" / "adapter" / "adapter_model.safetensors")
    assert {str(t.dtype) for t in adapter.values()} == {"torch.float32"}
    # a trained scorer loads the same way: its base in bf16, its adapters and head in float32
    trained = load_scorer(spec, settings(precision="bf16"), trained=tmp_path / "out")
    frozen = {str(p.dtype) for name, p in trained.model.named_parameters() if "lora_" not in name}
    assert frozen == {"torch.bfloat16"}
    assert {str(p.dtype) for name, p in trained.model.named_parameters() if "lora_" in name} == {"torch.float32"}
