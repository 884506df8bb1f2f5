from blindspot.stages import check_prompt_quality, setup_logging

setup_logging(snakemake.log[0])
check_prompt_quality(config=snakemake.config, triplets=snakemake.input.triplets, out=snakemake.output.quality)
