from blindspot.stages import build_model, setup_logging

setup_logging(snakemake.log[0])
build_model(recipe=snakemake.params.recipe, seed=snakemake.params.seed, out=snakemake.output.model)
