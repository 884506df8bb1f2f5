# Every pair and answer behind the tables, with its images: the site `blindspot view` writes. The report links
# to it (report/workflow.rst) rather than holding it: a directory in a report makes `--report report.html` fail,
# and a paper-scale site's thumbnails do not belong in one HTML file.


rule build_item_view:
    input:
        # the images they name are the run's, made before them
        records=targets.record_targets(config),
    output:
        out=directory(P("item_view")),
    log:
        LOG("build_item_view"),
    threads: get_threads("build_item_view")
    resources:
        **get_resources("build_item_view"),
    conda:
        get_env("build_item_view")
    script:
        "../scripts/run_stage.py"
