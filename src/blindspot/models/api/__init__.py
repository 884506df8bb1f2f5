"""Models behind an OpenAI-compatible chat-completions endpoint: the client, its limiter, the reply
cache and reading replies."""
