"""The official HumbleBench scorer (`HumbleBench/utils/metrics.py`, github.com/maifoundations/HumbleBench),
re-implemented to set its readings beside ours: an answer is split into lower-case words; it is right
if the label's word is among them and no other option letter is (so the article "a" is option A); the
NOTA hit (`E_accuracy`) counts only an answer that is exactly "E", over the questions labelled E."""

import re


def official_tokenize(text: str) -> set:
    return set(re.findall(r"\b\w+\b", text.lower()))


def official_is_prediction_correct(prediction: str, answer: str, choices=("A", "B", "C", "D", "E")) -> bool:
    pred_tokens, ans_tokens = official_tokenize(prediction), official_tokenize(answer)
    if not pred_tokens:
        return False
    incorrect = set()
    for choice in choices:
        if official_tokenize(choice) != ans_tokens:
            incorrect |= official_tokenize(choice) - ans_tokens
    return ans_tokens.issubset(pred_tokens) and pred_tokens.isdisjoint(incorrect)


def official_extract_answer(answer: str, choices=("a", "b", "c", "d", "e")) -> str:
    """The letter the official Proportions count an answer as: the one option letter among its words,
    else "NA"."""
    letters = official_tokenize(answer) & set(choices)
    return letters.pop().upper() if len(letters) == 1 else "NA"


def official_compute_metrics(lines: list[dict]) -> dict[str, float]:
    correct = sum(official_is_prediction_correct(line["prediction"], line["label"]) for line in lines)
    labelled_e = [line for line in lines if line["label"] == "E"]
    hits = sum(line["prediction"] == "E" for line in labelled_e)
    return {"Overall_accuracy": correct / len(lines) * 100, "E_accuracy": hits / max(len(labelled_e), 1) * 100}
