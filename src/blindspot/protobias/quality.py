"""Prompt-quality checks (paper, section 4.1 and Table 1): embedding similarity and NLI."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from blindspot.models.spec import ModelSpec

log = logging.getLogger(__name__)
NLI_LABELS = ("contradiction", "entailment", "neutral")


def embed(texts: Sequence[str], spec: ModelSpec, batch_size: int) -> np.ndarray:
    """Unit-norm sentence embeddings, one row per text."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(
        spec.path,
        revision=spec.revision,
        trust_remote_code=spec.trust_remote_code,
        # weights load straight onto the device in their dtype
        model_kwargs={"dtype": getattr(torch, spec.dtype), "device_map": spec.device_map},
    )
    vectors = model.encode(
        list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=True
    )
    return np.asarray(vectors, dtype=np.float64)


def nli_probabilities(pairs: Sequence[tuple[str, str]], spec: ModelSpec, batch_size: int) -> np.ndarray:
    """P(label | premise, hypothesis) with columns in NLI_LABELS order, one row per pair."""
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    device_map = spec.device_map  # first: a job without the GPUs its model asks for stops before reading weights
    tokenizer = AutoTokenizer.from_pretrained(spec.path, revision=spec.revision)
    model = AutoModelForSequenceClassification.from_pretrained(
        spec.path,
        revision=spec.revision,
        dtype=getattr(torch, spec.dtype),
        trust_remote_code=spec.trust_remote_code,
        device_map=device_map,
    )
    model.eval()
    label_index = {str(name).lower(): int(i) for i, name in model.config.id2label.items()}
    if not set(NLI_LABELS) <= set(label_index):
        raise ValueError(
            f"NLI model {spec.name} labels {sorted(label_index)} do not include {list(NLI_LABELS)}; "
            "set id2label in its config"
        )
    columns = [label_index[name] for name in NLI_LABELS]
    out = []
    for start in tqdm(range(0, len(pairs), batch_size), desc=f"nli {spec.name}", unit="batch"):
        premises, hypotheses = zip(*pairs[start : start + batch_size], strict=True)
        encoded = tokenizer(
            list(premises), list(hypotheses), padding=True, truncation=True, max_length=512, return_tensors="pt"
        ).to(model.device)
        with torch.inference_mode():
            logits = model(**encoded).logits.float()
        out.append(torch.softmax(logits, dim=-1)[:, columns].cpu().numpy())
    return np.concatenate(out).astype(np.float64) if out else np.zeros((0, len(NLI_LABELS)))


def score_prompt_quality(triplets: pd.DataFrame, embedder: ModelSpec, nli: ModelSpec, batch_size: int) -> pd.DataFrame:
    """Per triplet: pairwise cosine similarities of T, D_c, D_a and NLI labels between them."""
    t, dc, da = (triplets[c].tolist() for c in ("neutral_prompt", "correct_description", "adversarial_description"))
    n = len(triplets)
    vectors = embed(t + dc + da, embedder, batch_size)
    vt, vc, va = vectors[:n], vectors[n : 2 * n], vectors[2 * n :]
    probs = nli_probabilities(
        [pair for a, b in ((t, dc), (t, da), (dc, da), (da, dc)) for pair in zip(a, b, strict=True)], nli, batch_size
    )
    p_t_dc, p_t_da, p_dc_da, p_da_dc = (probs[i * n : (i + 1) * n] for i in range(4))
    both_ways = (p_dc_da + p_da_dc) / 2
    labels = np.array(NLI_LABELS)
    contradiction = NLI_LABELS.index("contradiction")
    return pd.DataFrame(
        {
            "triplet_id": triplets["triplet_id"].to_numpy(),
            "domain": triplets["domain"].to_numpy(),
            "sim_t_dc": (vt * vc).sum(axis=1),
            "sim_t_da": (vt * va).sum(axis=1),
            "sim_dc_da": (vc * va).sum(axis=1),
            "nli_t_dc": labels[p_t_dc.argmax(axis=1)] if n else [],
            "nli_t_da": labels[p_t_da.argmax(axis=1)] if n else [],
            "contradiction_dc_da": both_ways[:, contradiction],
            "nli_dc_da": labels[both_ways.argmax(axis=1)] if n else [],
            "embedding_model_id": embedder.model_id,
            "nli_model_id": nli.model_id,
        }
    )


TABLE1_ROWS: dict[str, tuple[str, Any]] = {
    # row label -> (group, how a domain's rows become the cell)
    "sim(T, D_c)": ("Semantic preservation", lambda f: f["sim_t_dc"].mean()),
    "sim(T, D_a)": ("Semantic preservation", lambda f: f["sim_t_da"].mean()),
    "sim(D_c, D_a)": ("Semantic preservation", lambda f: f["sim_dc_da"].mean()),
    "T -> D_c ent./neu. (%)": (
        "NLI-based structural validity",
        lambda f: 100 * f["nli_t_dc"].isin(["entailment", "neutral"]).mean(),
    ),
    "T -> D_a ent./neu. (%)": (
        "NLI-based structural validity",
        lambda f: 100 * f["nli_t_da"].isin(["entailment", "neutral"]).mean(),
    ),
    "D_c <-> D_a contra. (%)": (
        "NLI-based structural validity",
        lambda f: 100 * (f["nli_dc_da"] == "contradiction").mean(),
    ),
}


TABLE1_CAPTION = "Table 1: automatic prompt-quality validation of the accepted ProtoBias triplets."


def table1(quality_by_domain: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Table 1 of the paper: per domain, and overall pooled over all triplets (as the paper does)."""
    columns = {domain.capitalize(): frame for domain, frame in quality_by_domain.items()}
    columns["Overall"] = pd.concat(list(quality_by_domain.values()), ignore_index=True)
    rows = []
    for check, (group, aggregate) in TABLE1_ROWS.items():
        cells = {name: float(aggregate(frame)) if len(frame) else float("nan") for name, frame in columns.items()}
        rows.append({"group": group, "check": check, **cells})
    rows.append({"group": "Counts", "check": "triplets", **{name: float(len(f)) for name, f in columns.items()}})
    return pd.DataFrame(rows)
