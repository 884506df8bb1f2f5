from blindspot.stages import export_dataset, setup_logging

setup_logging(snakemake.log[0])
export_dataset(config=snakemake.config, benchmark=snakemake.input.benchmark, out=snakemake.output.dataset)
