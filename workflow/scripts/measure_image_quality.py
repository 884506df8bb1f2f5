from blindspot.stages import measure_image_quality, setup_logging

setup_logging(snakemake.log[0])
measure_image_quality(
    config=snakemake.config,
    shard=snakemake.wildcards.shard,
    pairs=snakemake.input.pairs,
    triplets=snakemake.input.triplets,
    seeds=snakemake.input.seeds,
    out=snakemake.output.quality,
)
