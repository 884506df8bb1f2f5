from blindspot.stages import generate_triplets, setup_logging

if __name__ == "__main__":  # vLLM spawns worker processes that re-import this file
    setup_logging(snakemake.log[0])
    generate_triplets(
        config=snakemake.config,
        domain=snakemake.wildcards.domain,
        generator=snakemake.wildcards.generator,
        shard=snakemake.wildcards.shard,
        seeds=snakemake.input.seeds,
        out=snakemake.output.triplets,
        counters_out=snakemake.output.counters,
    )
