from blindspot.stages import setup_logging, split_benchmark

setup_logging(snakemake.log[0])
split_benchmark(
    config=snakemake.config,
    pairs=snakemake.input.pairs,
    triplets=snakemake.input.triplets,
    out=snakemake.output.pairs,
    filter_validation=snakemake.output.filter_validation,
    preference_pairs=snakemake.output.preference_pairs,
    counters_out=snakemake.output.counters,
)
