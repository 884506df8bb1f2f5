"""Models behind one interface per kind: text generation and VLM scoring through vLLM or transformers,
ProtoScore's model, devices and GPU slots, checkpoints and tokenizers; endpoints in `models.api`."""
