"""`blindspot evaluate` and scoring in memory from Python (`blindspot.api`)."""
