from blindspot.stages import keep_consensus_pairs, setup_logging

setup_logging(snakemake.log[0])
keep_consensus_pairs(
    config=snakemake.config,
    domain=snakemake.wildcards.domain,
    renders=snakemake.input.renders,
    scores=snakemake.input.scores,
    out=snakemake.output.pairs,
    counters_out=snakemake.output.counters,
)
