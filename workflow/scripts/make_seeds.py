from blindspot.stages import make_seeds, setup_logging

setup_logging(snakemake.log[0])
make_seeds(
    taxonomy=snakemake.input.taxonomy,
    domain=snakemake.wildcards.domain,
    n_seeds=snakemake.params.n_seeds,
    seed=snakemake.params.seed,
    out=snakemake.output.seeds,
)
