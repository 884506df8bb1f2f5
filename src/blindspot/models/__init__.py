"""Models: text generation and VLM scoring through vLLM or transformers, the hub cache, and the
tiny random-weight recipes (`tiny`) that tests and the tiny preset build."""
