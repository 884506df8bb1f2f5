"""Models: text generation and VLM scoring through vLLM or transformers, the hub cache, and the
tiny random-weight recipes (`models.tiny`) that tests and the tiny preset build."""
