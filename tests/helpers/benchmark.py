import json
from pathlib import Path

import pandas as pd

DOMAINS = ["animals", "demography", "objects"]


def benchmark_pairs(n_triplets=30, models=("flux", "sana")):
    rows = []
    for i in range(n_triplets):
        domain = DOMAINS[i % 3]
        for t2i in models:
            corr, adv = 9 if i % 4 else 3, 8 if i % 5 else 2
            rows.append(
                {
                    "pair_id": f"p{i}-{t2i}",
                    "triplet_id": f"t{i}",
                    "seed_id": f"s{i // 3}",
                    "domain": domain,
                    "t2i": t2i,
                    "corr_image_id": f"c{i}-{t2i}",
                    "adv_image_id": f"a{i}-{t2i}",
                    "corr_path": f"/c{i}{t2i}.png",
                    "adv_path": f"/a{i}{t2i}.png",
                    "kept": corr >= 8 and adv >= 8,
                    "vlm_scores": json.dumps({"qwen": {"corr": corr, "adv": adv}, "intern": {"corr": corr, "adv": 9}}),
                }
            )
    return pd.DataFrame(rows)


def export_small_benchmark(folder, image, prompt) -> tuple[pd.DataFrame, Path]:
    """Eight pairs with both splits, exported as `export_dataset` writes it into `folder`/dataset, their
    images made by `image(path, role, row)` and neutral prompts by `prompt(row)`: (the pairs, the folder)."""

    from blindspot.protobias.export import export_dataset
    from blindspot.protobias.split import assign_splits

    pairs = benchmark_pairs(8, models=("flux",))
    for role in ("corr", "adv"):
        pairs[f"{role}_path"] = [image(folder / f"{role}{i}.png", role, i) for i in range(len(pairs))]
    pairs = pairs.assign(
        subcategory="birds",
        neutral_prompt=[prompt(i) for i in range(len(pairs))],
        correct_description="d_c",
        adversarial_description="d_a",
        correct_instance="penguin",
        adversarial_instance="robin",
        aux_element="stone",
        knob="count",
        correct_value="one",
        adversarial_value="two",
        seed=7,
        generator="g",
        added_entries="",
    )
    benchmark = assign_splits(pairs, 1, 0.5)
    assert set(benchmark["split"]) == {"train", "test"}
    export_dataset(benchmark, folder / "dataset", {"name": "T", "run_name": "r", "threshold": 8, "models": []})
    return benchmark, folder / "dataset"
