"""`blindspot doctor`: the preflight of a run, its checks and its report."""
