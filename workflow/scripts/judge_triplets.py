from blindspot.stages import judge_triplets, setup_logging

if __name__ == "__main__":  # vLLM spawns worker processes that re-import this file
    setup_logging(snakemake.log[0])
    judge_triplets(
        config=snakemake.config,
        domain=snakemake.wildcards.domain,
        judge=snakemake.wildcards.judge,
        generator=snakemake.wildcards.generator,
        shard=snakemake.wildcards.shard,
        triplets=snakemake.input.triplets,
        seeds=snakemake.input.seeds,
        out=snakemake.output.judgments,
        counters_out=snakemake.output.counters,
    )
