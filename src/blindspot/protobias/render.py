"""Render D_c and D_a of each accepted triplet with a text-to-image model, resumably.

Every image is content-addressed: its id hashes the model, revision, description, seed and
sampling settings, and it is written (atomically) next to a sidecar holding its sha256. A job
that was killed or preempted finds every finished image on disk, checks it against its sidecar,
and renders only what is missing or corrupt. Each image has its own seeded generator, so any
image can be re-made alone from its row. A job renders in fixed batches of its planned images, and a
resumed job renders a missing image in the same batch as before: the batch's make-up changes the
floating-point sums, so only then are its pixels, on a CPU, bit for bit an uninterrupted job's. A
description's text embedding, encoded alone (`DiffusersRenderer`), does not depend on its batch.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from blindspot.images import BackgroundWrites, Backoff, hash_sidecar
from blindspot.io import remove_stale_temps, stable_id, write_bytes, write_text
from blindspot.models.spec import ModelSpec

log = logging.getLogger(__name__)
ROLES = {"corr": "correct_description", "adv": "adversarial_description"}


@dataclass(frozen=True)
class RenderJob:
    image_id: str
    triplet_id: str
    role: str
    description: str
    seed: int
    path: Path


def render_settings(spec: ModelSpec) -> dict[str, Any]:
    """What, besides the description and seed, decides the pixels."""
    return {"pipeline": spec.pipeline, "dtype": spec.dtype, **spec.render}


def image_seed(triplet_id: str, index: int, base_seed: int) -> int:
    """One seed per triplet and image index, shared by I_corr and I_adv so both start from the
    same noise and differ by their descriptions, not by luck."""
    return int(stable_id(triplet_id, index, base_seed)[:8], 16)


def triplets_of_seeds(triplets: pd.DataFrame, seed_ids: pd.Series) -> pd.DataFrame:
    """The accepted triplets written from the given seeds: a seed shard's share, every generator's."""
    return triplets[triplets["seed_id"].isin(seed_ids)]


def plan_renders(
    triplets: pd.DataFrame, spec: ModelSpec, images_dir: Path, n_per_description: int, base_seed: int
) -> list[RenderJob]:
    settings = render_settings(spec)
    jobs = []
    for triplet in triplets.itertuples(index=False):
        for index in range(n_per_description):
            seed = image_seed(triplet.triplet_id, index, base_seed)
            for role, column in ROLES.items():
                description = getattr(triplet, column)
                image_id = stable_id(spec.model_id, spec.revision, description, seed, settings)
                jobs.append(
                    RenderJob(image_id, triplet.triplet_id, role, description, seed, images_dir / f"{image_id}.png")
                )
    return jobs


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_image(path: Path) -> str:
    """'ok' when the image decodes and matches its recorded hash, else 'missing' or 'corrupt'."""
    return verified_image(path)[0]


def verified_image(path: Path) -> tuple[str, str | None]:
    """`check_image`'s answer and, for an image found whole, its sha256 (the one recorded beside it)."""
    from PIL import Image

    if not path.exists():
        return "missing", None
    sidecar = hash_sidecar(path)
    recorded = sidecar.read_text().strip() if sidecar.exists() else None
    if recorded != sha256_of(path):
        return "corrupt", None
    try:
        with Image.open(path) as image:
            image.load()
    except OSError:
        return "corrupt", None
    return "ok", recorded


def save_image(image: Any, path: Path) -> str:
    """Write the PNG, then its hash; a kill between the two leaves an image that is re-rendered. The
    PNG is encoded and hashed in memory: the file is written once and never read back."""
    encoded = io.BytesIO()
    image.save(encoded, format="PNG")
    data = encoded.getbuffer()
    write_bytes(path, data)
    digest = hashlib.sha256(data).hexdigest()
    write_text(hash_sidecar(path), digest + "\n")
    return digest


# What a pipeline's `encode_prompt` returns, in order, under the names its call takes them by (None: what the
# call makes again itself, FLUX's text ids). A pipeline not named here is given the descriptions as text.
ENCODE_PROMPT_OUTPUTS: dict[str, tuple[str | None, ...]] = {
    "FluxPipeline": ("prompt_embeds", "pooled_prompt_embeds", None),
    "StableDiffusion3Pipeline": (
        "prompt_embeds",
        "negative_prompt_embeds",
        "pooled_prompt_embeds",
        "negative_pooled_prompt_embeds",
    ),
    "SanaPipeline": (
        "prompt_embeds",
        "prompt_attention_mask",
        "negative_prompt_embeds",
        "negative_prompt_attention_mask",
    ),
}


class DiffusersRenderer:
    """A diffusers pipeline built once per job; renders batches with one generator per image. Each description is
    text-encoded once, alone, for all its seeds: its embeddings are kept while the calls ask for it, and a job's
    images come in plan order, where a description's seeds follow one another. (Not `num_images_per_prompt`: a
    batch may hold unequal numbers of two descriptions' seeds, and diffusers 0.42's Sana pairs several prompts'
    attention masks with the wrong images there.)"""

    def __init__(self, spec: ModelSpec, pipeline: Any = None):
        """`pipeline`: one already built, on the spec's device (the GPU check's random real-size ones)."""
        import diffusers
        import torch

        self.spec = spec
        self.device = spec.device  # first: a job without the GPUs its model asks for stops before reading weights
        pipeline_class = getattr(diffusers, spec.pipeline)
        # Weights load straight onto the device in their dtype; a pipeline that asks for several GPUs
        # has its components spread over them ("balanced", diffusers' one strategy for that).
        self.pipeline = pipeline or pipeline_class.from_pretrained(
            spec.path,
            revision=spec.revision,
            dtype=getattr(torch, spec.dtype),
            device_map="balanced" if self.device == "cuda" and spec.gpus > 1 else self.device,
        )
        modules = {name: part for name, part in self.pipeline.components.items() if isinstance(part, torch.nn.Module)}
        for name, dtype in spec.render.get("component_dtypes", {}).items():
            if name not in modules:
                raise ValueError(
                    f"model '{spec.name}': render.component_dtypes names '{name}', which is no module of its "
                    f"{spec.pipeline} (those are: {', '.join(sorted(modules))})"
                )
            modules[name].to(getattr(torch, dtype))
        self._speed_up(spec)
        self.pipeline.set_progress_bar_config(disable=True)
        settings = spec.render
        arguments = {
            "num_inference_steps": settings["steps"],
            "guidance_scale": settings["guidance"],
            "height": settings["height"],
            "width": settings["width"],
            **settings.get("pipeline_kwargs", {}),
        }
        if "max_sequence_length" in settings:
            arguments["max_sequence_length"] = settings["max_sequence_length"]
        self.encoded_as = ENCODE_PROMPT_OUTPUTS.get(type(self.pipeline).__name__)
        self.encode_arguments = self._encode_arguments(arguments) if self.encoded_as else {}
        # What `encode_prompt` takes is not given to the call again: it refuses a negative prompt beside its embeddings.
        self.call_arguments = {name: value for name, value in arguments.items() if name not in self.encode_arguments}
        self.embeddings: dict[str, dict[str, Any]] = {}  # per description, those the last call asked for
        self.negative: dict[str, Any] = {}  # the negative prompt's, once guidance has encoded it

    def _speed_up(self, spec: ModelSpec) -> None:
        """The registry entry's `render.fuse_qkv` (one matrix product for query, key and value) and `render.compile`
        (torch.compile) on the pipeline's denoiser, its transformer or UNet: where the time goes."""
        import torch

        settings = spec.render
        if not (settings.get("fuse_qkv") or settings.get("compile")):
            return
        name = next((name for name in ("transformer", "unet") if getattr(self.pipeline, name, None) is not None), None)
        if name is None:
            raise ValueError(
                f"model '{spec.name}': render.fuse_qkv or render.compile, but {spec.pipeline} has no denoiser"
            )
        denoiser = getattr(self.pipeline, name)
        if settings.get("fuse_qkv"):
            if hasattr(denoiser, "fuse_qkv_projections"):
                denoiser.fuse_qkv_projections()
            if not any(getattr(module, "fused_projections", False) for module in denoiser.modules()):
                raise ValueError(
                    f"model '{spec.name}': render.fuse_qkv, but diffusers' {type(denoiser).__name__} cannot fuse them"
                )
        if settings.get("compile"):
            setattr(self.pipeline, name, torch.compile(denoiser))

    def _encode_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments of `encode_prompt` the call would give it: the call's defaults (Sana's instruction it
        prefixes each prompt with) and settings, and whether guidance encodes a negative prompt too (SD3's and
        Sana's calls decide it so)."""
        import inspect

        taken = inspect.signature(self.pipeline.encode_prompt).parameters
        defaults = {
            name: parameter.default
            for name, parameter in inspect.signature(self.pipeline.__call__).parameters.items()
            if parameter.default is not inspect.Parameter.empty
        }
        given = defaults | arguments | {"do_classifier_free_guidance": self.spec.render["guidance"] > 1}
        return {name: value for name, value in given.items() if name in taken and name != "prompt"}

    def _encoded(self, description: str) -> dict[str, Any]:
        """One description's embeddings, by the names the call takes them by; the negative prompt's are kept from
        its first encoding and handed to the later ones, which then encode the description only."""
        outputs = self.pipeline.encode_prompt(prompt=[description], **self.encode_arguments | self.negative)
        named = {
            name: value for name, value in zip(self.encoded_as, outputs, strict=True) if name and value is not None
        }
        self.negative = {name: value for name, value in named.items() if name.startswith("negative_")}
        return named

    def _prompts(self, descriptions: list[str]) -> dict[str, Any]:
        """The call's text arguments for one image per description: the descriptions themselves, or the embeddings
        of each distinct one, encoded when a call first asks for it, repeated for its seeds."""
        import torch

        if not self.encoded_as:
            return {"prompt": descriptions}
        self.embeddings = {
            description: self.embeddings.get(description) or self._encoded(description)
            for description in dict.fromkeys(descriptions)
        }
        names = next(iter(self.embeddings.values()))
        prompts = {name: torch.cat([self.embeddings[d][name] for d in descriptions]) for name in names}
        # Sana's call has a negative prompt, "", by default, and refuses one beside the negative prompt's embeddings.
        return prompts | ({"negative_prompt": None} if "negative_prompt_embeds" in prompts else {})

    def render(self, descriptions: list[str], seeds: list[int]) -> list[Any]:
        import torch

        with torch.inference_mode():
            return self.pipeline(
                **self._prompts(descriptions),
                generator=[torch.Generator(self.device).manual_seed(seed) for seed in seeds],
                **self.call_arguments,
            ).images


def render_triplets(
    triplets: pd.DataFrame,
    spec: ModelSpec,
    images_dir: str | Path,
    n_per_description: int,
    base_seed: int,
    batch_size: int,
    renderer: DiffusersRenderer | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Render what is not on disk yet; return one row per image and the counters."""
    started = time.monotonic()
    jobs = plan_renders(triplets, spec, Path(images_dir), n_per_description, base_seed)
    # The images folder is shared by the domain's shards, not an output: this job cleans its own images' leftovers.
    remove_stale_temps([path for job in jobs for path in (job.path, hash_sidecar(job.path))])
    checked = {job.image_id: verified_image(job.path) for job in jobs}
    states = {image_id: state for image_id, (state, _) in checked.items()}
    pending = [job for job in jobs if states[job.image_id] != "ok"]
    found = Counter(states.values())
    log.info("%s: %d images, %d to render (on disk: %s)", spec.name, len(jobs), len(pending), dict(found))
    # The hashes of the images found whole, then of those written now.
    digests = {image_id: digest for image_id, (state, digest) in checked.items() if state == "ok"}
    batches = [jobs[start : start + batch_size] for start in range(0, len(jobs), batch_size)]
    unfinished = [batch for batch in batches if any(states[job.image_id] != "ok" for job in batch)]
    if unfinished:
        renderer = renderer or DiffusersRenderer(spec)
        saved = {}
        # One batch's PNGs encode and hash while the next renders; at most a batch waits to be written.
        with BackgroundWrites(limit=batch_size) as writes:
            backoff = Backoff(spec.name)
            for batch in tqdm(unfinished, desc=f"render {spec.name}", unit="batch"):
                images = backoff.run(
                    lambda part: renderer.render([j.description for j in part], [j.seed for j in part]), batch
                )
                for job, image in zip(batch, images, strict=True):
                    if states[job.image_id] != "ok":
                        saved[job.image_id] = writes.submit(save_image, image, job.path)
        digests |= {image_id: write.result() for image_id, write in saved.items()}
    settings = spec.render
    rows = [
        {
            "image_id": job.image_id,
            "triplet_id": job.triplet_id,
            "role": job.role,
            "description": job.description,
            "t2i": spec.name,
            "model_id": spec.model_id,
            "model_revision": spec.revision or "",
            "seed": job.seed,
            "steps": settings["steps"],
            "guidance": float(settings["guidance"]),
            "height": settings["height"],
            "width": settings["width"],
            "settings": json.dumps(render_settings(spec), sort_keys=True),
            "path": str(job.path),
            "sha256": digests[job.image_id],
        }
        for job in jobs
    ]
    counters = {
        "images": len(jobs),
        "reused": found["ok"],
        "rendered": len(pending),
        "corrupt_rerendered": found["corrupt"],
        # What the model made, the whole of each batch with an image to render: what throughput is over.
        "computed_items": sum(len(batch) for batch in unfinished),
        "seconds": round(time.monotonic() - started, 3),
    }
    return pd.DataFrame(rows), counters
