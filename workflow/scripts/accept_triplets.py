from blindspot.stages import accept_triplets, setup_logging

setup_logging(snakemake.log[0])
accept_triplets(
    seeds=snakemake.input.seeds,
    raw=snakemake.input.raw,
    judgments=snakemake.input.judgments,
    judges=snakemake.params.judges,
    out=snakemake.output.triplets,
    counters_out=snakemake.output.counters,
)
