from blindspot.stages import render_images, setup_logging

setup_logging(snakemake.log[0])
render_images(
    config=snakemake.config,
    domain=snakemake.wildcards.domain,
    t2i=snakemake.wildcards.t2i,
    shard=snakemake.wildcards.shard,
    triplets=snakemake.input.triplets,
    seeds=snakemake.input.seeds,
    images_dir=snakemake.params.images_dir,
    out=snakemake.output.renders,
    counters_out=snakemake.output.counters,
)
