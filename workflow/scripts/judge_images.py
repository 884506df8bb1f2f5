from blindspot.stages import judge_images, setup_logging

setup_logging(snakemake.log[0])
judge_images(
    config=snakemake.config,
    domain=snakemake.wildcards.domain,
    t2i=snakemake.wildcards.t2i,
    vlm=snakemake.wildcards.vlm,
    shard=snakemake.wildcards.shard,
    renders=snakemake.input.renders,
    out=snakemake.output.scores,
    counters_out=snakemake.output.counters,
)
