"""The comparisons of bench/compare.py, one module each: `compare(config, repeats) -> list[Row]`."""
