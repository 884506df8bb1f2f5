# The image stage: render each accepted triplet's D_c and D_a with every text-to-image model.


rule render_images:
    input:
        triplets=P("triplets"),
        seeds=P("seeds"),
        model=get_role_model_input("t2i"),
    output:
        renders=P("renders"),
        counters=P("render_counters"),
    params:
        model=get_model_params("t2i"),
        images_dir=lambda wildcards: P("images", domain=wildcards.domain, t2i=wildcards.t2i),
        images_per_description=config["image_stage"]["images_per_description"],
        seed=config["seed"],
    log:
        LOG("render_images", "{domain}/{t2i}/{shard}"),
    benchmark:
        BENCH("render_images", "{domain}/{t2i}/{shard}")
    resources:
        gpu=get_gpus("t2i"),
    conda:
        "../envs/t2i.yaml"
    script:
        "../scripts/render_images.py"
