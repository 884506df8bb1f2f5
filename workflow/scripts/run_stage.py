# One adapter for every rule: the rule's name is the step, its named inputs, outputs, params and
# wildcards are the step's arguments (see blindspot.steps).
from blindspot.models.gpu_slots import claim_for_job

if __name__ == "__main__":  # vLLM spawns worker processes that re-import this file
    # On one workstation, the job's own GPUs, before torch or vLLM is imported (profiles/workstation).
    claim_for_job(snakemake.resources.get("gpu", 0), snakemake.config.get("workstation_gpus"), snakemake.log[0])
    from blindspot.steps import run_from_snakemake

    run_from_snakemake(snakemake)
