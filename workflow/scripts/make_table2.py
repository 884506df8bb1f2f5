from blindspot.stages import make_table2, setup_logging

setup_logging(snakemake.log[0])
make_table2(
    quality=snakemake.input.quality,
    csv=snakemake.output.csv,
    markdown=snakemake.output.markdown,
    latex=snakemake.output.latex,
)
