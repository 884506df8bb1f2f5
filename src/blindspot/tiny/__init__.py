"""Tiny models of the real architectures with random weights, built locally for tests and the tiny
preset. Product code never imports them; `steps.models.build_model` is their one entry."""
