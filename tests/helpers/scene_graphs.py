"""A small scene-graph file in the Panoptic Scene Graph style, with drawn images, for the tests."""

import json
from pathlib import Path

from PIL import Image, ImageDraw

# (image id, background, objects as (id, category, colour, box), relations as (subject, predicate, object))
SCENES = [
    (
        "street",
        (200, 200, 200),
        [(1, "car", (220, 30, 30), (8, 40, 56, 72)), (2, "tree", (20, 140, 40), (64, 4, 92, 72))],
        [(1, "parked next to", 2)],
    ),
    (
        "kitchen",
        (240, 230, 210),
        [
            (1, "table", (120, 80, 40), (10, 50, 86, 90)),
            (2, "cup", (30, 60, 220), (40, 34, 56, 50)),
            (3, "lamp", (250, 220, 60), (70, 6, 90, 40)),
        ],
        [(2, "on", 1), (3, "above", 1)],
    ),
]


def make_scene_graphs(folder: Path) -> Path:
    """Draw each scene (coloured boxes on a plain background) and write scene_graphs.json beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    images = []
    for image_id, background, objects, relations in SCENES:
        picture = Image.new("RGB", (96, 96), background)
        draw = ImageDraw.Draw(picture)
        for _, _, colour, box in objects:
            draw.rectangle(box, fill=colour)
        picture.save(folder / f"{image_id}.png")
        images.append(
            {
                "image_id": image_id,
                "file_name": f"{image_id}.png",
                "objects": [{"id": i, "category": c, "bbox": list(box)} for i, c, _, box in objects],
                "relations": [{"subject": s, "predicate": p, "object": o} for s, p, o in relations],
            }
        )
    path = folder / "scene_graphs.json"
    path.write_text(json.dumps({"images": images}, indent=2))
    return path
