"""HumbleBench: questions with a "None of the above" option, the six settings, answering, the
answer parser and the NOTA-aware metrics."""
