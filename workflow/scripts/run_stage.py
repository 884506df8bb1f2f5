# One adapter for every rule: the rule's name is the step, its named inputs, outputs, params and
# wildcards are the step's arguments (see blindspot.steps).
from blindspot.steps import run_from_snakemake

if __name__ == "__main__":  # vLLM spawns worker processes that re-import this file
    run_from_snakemake(snakemake)
