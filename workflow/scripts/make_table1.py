from blindspot.stages import make_table1, setup_logging

setup_logging(snakemake.log[0])
make_table1(
    quality=snakemake.input.quality,
    csv=snakemake.output.csv,
    markdown=snakemake.output.markdown,
    latex=snakemake.output.latex,
)
