"""The viewer (`workflow/rules/view.smk`): the run's per-item records with their images, as the static site
`blindspot view` writes (`blindspot.view`), which the Snakemake report holds."""

from __future__ import annotations

from collections.abc import Sequence

from blindspot.steps import log


def build_item_view(records: Sequence[str], out: str) -> None:
    """The site of every records file the run wrote (each pair with both images, each answer with its image) in
    the folder `out`."""
    from blindspot.view import build_site

    index = build_site(records, out)
    log.info("the items' viewer: %s", index)
