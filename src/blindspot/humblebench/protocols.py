"""How each VLM is asked HumbleBench's questions: its answering protocol, and the settings it answers.

A protocol is what the paper's authors did for one model in the official code
(github.com/maifoundations/HumbleBench, `models/*.py`; docs/humblebench_official.md): the prompt around
the question (a system message, the official reasoning prompt or the letter instruction), the decoding
(greedy, the checkpoint's own generation config that the official wrapper leaves `generate` to, or
sampling), the answer's token budget, and where the wrapper cuts the answer out of what the model wrote.
It is registry data, an entry's `humble_protocol`:

    humble_protocol:
      prompt: config/prompts/humble_models/humble_mulberry_v1.yaml  # around the setting's question
      system: You are a helpful assistant.
      decoding: greedy            # or checkpoint, or {temperature: 0.7, top_p: 0.9, top_k: 50}
      max_tokens: 1024
      answer_after: ["final answer is:"]  # cut after each, in turn, where present (any case)

`humblebench.protocol` chooses between two: `official` runs each entry's protocol (what it leaves out is
the letter prompt `humblebench.prompt`, greedy decoding, `humblebench.max_new_tokens` and no cut);
`uniform` asks every model the letter prompt, greedy, for a letter-only comparison (docs/fidelity.md
H-P1). A setting's template shows the question (a cautious prompt, the stem, the options); the protocol's
prompt is put around it, as the official code appends its post-prompt to the setting's question.

The protocol and the settings a model answers are read from the config in `registry` (`answer_protocol`,
`vlm_settings`), where the plan reads them too. The settings: its entry's `humble_settings`, else its group's in
`humblebench.group_settings` (the paper ran its proprietary models in the Original setting only), else all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from blindspot.humblebench.reasoning import Split
from blindspot.humblebench.settings import Presented
from blindspot.models.vlm_scoring import image_conversation
from blindspot.prompts import PromptTemplate
from blindspot.registry import AnswerProtocol, Decoding, answer_protocol, vlm_settings

__all__ = [
    "AnswerProtocol",
    "Decoding",
    "answer_protocol",
    "conversation",
    "cut_answer",
    "question_seed",
    "vlm_settings",
]


def cut_answer(text: str, answer_after: Sequence[str]) -> Split:
    """`text` cut where the official wrapper cuts it: after the last occurrence of each of `answer_after` in
    turn (in any case), each looked for after the cut before it; what the text does not hold is passed over.
    With no marker found, all of it is the answer (`closed` False)."""
    folded, at = text.lower(), 0
    for marker in answer_after:
        found = folded.rfind(marker.lower(), at)
        if found >= 0:
            at = found + len(marker)
    return Split(text[:at].strip(), text[at:].strip(), closed=at > 0)


def question_seed(seed: int, question_id: str, setting: str) -> int:
    """The sampling seed of one question in one setting: the same on every run, whatever the batch."""
    digest = hashlib.sha256(f"{seed}\0{question_id}\0{setting}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def conversation(setting: PromptTemplate, prompt: PromptTemplate, system: str, shown: Presented) -> list[dict]:
    """The chat one question is asked in: the setting's question (its template rendered) inside the
    protocol's `prompt`, after the image, with the protocol's `system` message, else the prompt's own."""
    *setting_system, question = setting.render(**shown.prompt_fields())
    if setting_system:
        raise ValueError(
            f"setting template {setting.path}: a setting shows the question; the system message is the model's"
        )
    *own_system, user = image_conversation(prompt, question=question["content"])
    if system and own_system:
        raise ValueError(
            f"prompt template {prompt.path} has a system message; the protocol's `system` would replace it"
        )
    return [{"role": "system", "content": system}, user] if system else [*own_system, user]
