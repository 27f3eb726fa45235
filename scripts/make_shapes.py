#!/usr/bin/env python3
"""Generate a local detection data set: coloured circles, squares and triangles on textures.

No downloads: each image (64x64 RGB by default) has a smooth random texture for background
(low-frequency sine waves in two random colours, plus pixel noise) and 1 to 3 objects of 3
classes (circle, square, triangle), each in a random colour far from the background's, of a
random size (a sixth to a half of the image side) and place, fully inside the image and
overlapping no other object's box. Shapes are drawn with Pillow at 4x and
box-filtered down, so their edges are smooth. The same --seed gives the same bytes.

Writes, under --out, the PASCAL VOC layout SSD's data/VOC0712/create_data.sh expects:

- ``Images/NNNNNN.png`` and ``Annotations/NNNNNN.xml`` (VOC XML: size, then one ``object``
  per shape with name, difficult 0 and the pixel ``bndbox``),
- ``trainval.txt`` and ``test.txt`` ("Images/NNNNNN.png Annotations/NNNNNN.xml" lines),
  ``test_name_size.txt`` (get_image_size's "NAME HEIGHT WIDTH" lines),
- ``labelmap.prototxt`` (background 0, circle 1, square 2, triangle 3),
- ``shapes_trainval_lmdb`` and ``shapes_test_lmdb``: AnnotatedDatums made by
  ``pycaffe convert_annoset --anno_type=detection`` (raw pixels).

    python scripts/make_shapes.py --out data/shapes [--train 1000] [--test 200] [--size 64]
"""
import argparse
import os
import sys
import time

import numpy as np
from PIL import Image, ImageDraw

from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.log import LOG, run_script

CLASSES = ("circle", "square", "triangle")
SUPERSAMPLE = 4
MAX_OBJECTS = 3
MAX_OVERLAP = 0.0
MIN_COLOUR_DISTANCE = 120.0   # Euclidean RGB distance of an object's colour from the texture's


def texture(rng, size):
    """(size, size, 3) float RGB: a blend of two random colours by smooth random waves,
    plus noise; returns it and its mean colour."""
    y, x = np.mgrid[0:size, 0:size] / size
    field = np.zeros((size, size))
    for _ in range(4):
        fx, fy = rng.uniform(-4, 4, 2)
        field += np.sin(2 * np.pi * (fx * x + fy * y) + rng.uniform(0, 2 * np.pi))
    field = (field - field.min()) / max(np.ptp(field), 1e-6)
    low, high = rng.uniform(0, 255, (2, 3))
    image = low + field[:, :, None] * (high - low)
    image += rng.normal(0, 8, image.shape)
    return image, image.reshape(-1, 3).mean(axis=0)


def object_colour(rng, background):
    """A random RGB colour at least MIN_COLOUR_DISTANCE from ``background``."""
    while True:
        colour = rng.uniform(0, 255, 3)
        if np.linalg.norm(colour - background) >= MIN_COLOUR_DISTANCE:
            return colour


def shape_points(kind, cx, cy, half, angle):
    """The outline of a shape centred at (cx, cy) with half-extent ``half``: a circle's
    bounding corners, or a polygon's vertices (square and triangle turned by ``angle``)."""
    if kind == "circle":
        return np.array([[cx - half, cy - half], [cx + half, cy + half]])
    count = 4 if kind == "square" else 3
    start = np.pi / 4 if kind == "square" else -np.pi / 2
    turns = start + angle + 2 * np.pi * np.arange(count) / count
    radius = half * (np.sqrt(2) if kind == "square" else 1.0)
    points = np.stack([cx + radius * np.cos(turns), cy + radius * np.sin(turns)], axis=1)
    if kind == "square":   # keep the rotated square within the half-extent box
        points = [cx, cy] + (points - [cx, cy]) / np.abs(points - [cx, cy]).max() * half
    return points


def iou(a, b):
    """Intersection over union of two (xmin, ymin, xmax, ymax) boxes."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    area = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])
    return inter / (area - inter)


def make_image(rng, size):
    """(uint8 (size, size, 3) RGB image, [(class name, (xmin, ymin, xmax, ymax))])."""
    background, mean = texture(rng, size)
    big = Image.fromarray(np.zeros((size * SUPERSAMPLE,) * 2, np.uint8), "L")
    layers = []
    objects = []
    for _ in range(rng.integers(1, MAX_OBJECTS + 1)):
        for _attempt in range(20):
            kind = CLASSES[rng.integers(len(CLASSES))]
            half = rng.uniform(size / 12, size / 4)
            cx, cy = rng.uniform(half + 1, size - half - 1, 2)
            angle = rng.uniform(-np.pi / 12, np.pi / 12)
            points = shape_points(kind, cx, cy, half, angle)
            box = (int(np.floor(points[:, 0].min())), int(np.floor(points[:, 1].min())),
                   int(np.ceil(points[:, 0].max())), int(np.ceil(points[:, 1].max())))
            if all(iou(box, other) <= MAX_OVERLAP for _, other in objects):
                break
        else:
            continue
        mask = big.copy()
        draw = ImageDraw.Draw(mask)
        scaled = [tuple(p) for p in points * SUPERSAMPLE]
        if kind == "circle":
            draw.ellipse(scaled[0] + scaled[1], fill=255)
        else:
            draw.polygon(scaled, fill=255)
        coverage = np.asarray(mask.resize((size, size), Image.Resampling.BOX), float) / 255
        layers.append((coverage, object_colour(rng, mean)))
        objects.append((kind, box))
    image = background
    for coverage, colour in layers:   # later objects are drawn over earlier ones
        image = image * (1 - coverage[:, :, None]) + colour * coverage[:, :, None]
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), objects


def annotation_xml(filename, size, objects):
    """PASCAL VOC annotation text for one image."""
    parts = ["<annotation>", "  <folder>shapes</folder>", f"  <filename>{filename}</filename>",
             f"  <size><width>{size}</width><height>{size}</height><depth>3</depth></size>"]
    for kind, (xmin, ymin, xmax, ymax) in objects:
        parts += ["  <object>", f"    <name>{kind}</name>", "    <difficult>0</difficult>",
                  f"    <bndbox><xmin>{xmin}</xmin><ymin>{ymin}</ymin>"
                  f"<xmax>{xmax}</xmax><ymax>{ymax}</ymax></bndbox>", "  </object>"]
    return "\n".join(parts + ["</annotation>", ""])


def label_map_text():
    items = [("none_of_the_above", 0, "background")]
    items += [(name, label, name) for label, name in enumerate(CLASSES, 1)]
    return "".join(f'item {{\n  name: "{name}"\n  label: {label}\n  display_name: "{shown}"\n}}\n'
                   for name, label, shown in items)


def write_text(path, text):
    with atomic_write(path, "w") as stream:
        stream.write(text)


def write_split(rng, out, name, first, count, size):
    """Write ``count`` images and annotations numbered from ``first``; return the list file."""
    lines = []
    for number in range(first, first + count):
        stem = f"{number:06d}"
        image, objects = make_image(rng, size)
        Image.fromarray(image, "RGB").save(os.path.join(out, "Images", stem + ".png"),
                                           compress_level=1)
        write_text(os.path.join(out, "Annotations", stem + ".xml"),
                   annotation_xml(stem + ".png", size, objects))
        lines.append(f"Images/{stem}.png Annotations/{stem}.xml\n")
    listfile = os.path.join(out, f"{name}.txt")
    write_text(listfile, "".join(lines))
    return listfile


def convert(out, listfile, db_name, backend):
    """``pycaffe convert_annoset --anno_type=detection`` on one list file."""
    from pycaffe_cli.commands.convert_annoset import convert_annoset
    convert_annoset(rootfolder=out + "/", listfile=listfile, db_name=db_name,
                    anno_type="detection", label_type="xml",
                    label_map_file=os.path.join(out, "labelmap.prototxt"), check_label=True,
                    min_dim=0, max_dim=0, gray=False, shuffle=False, backend=backend,
                    resize_width=0, resize_height=0, check_size=True, encoded=False,
                    encode_type="", seed=None)


def main(argv=None):
    parser = argparse.ArgumentParser(prog=os.path.basename(__file__),
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data/shapes", help="output folder")
    parser.add_argument("--train", type=int, default=1000, help="trainval images")
    parser.add_argument("--test", type=int, default=200, help="test images")
    parser.add_argument("--size", type=int, default=64, help="image side in pixels")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--backend", default="lmdb", choices=["lmdb", "leveldb"])
    parser.add_argument("--no-db", dest="db", action="store_false",
                        help="write the images, annotations and lists only")
    args = parser.parse_args(argv)
    if args.train < 1 or args.test < 1:
        parser.error("--train and --test need at least one image each")
    if args.size < 24:
        parser.error("--size must be at least 24 pixels")
    return run_script(parser.prog, generate, args)


def generate(args):
    started = time.perf_counter()
    out = args.out.rstrip("/") or "/"
    for folder in ("Images", "Annotations"):
        os.makedirs(os.path.join(out, folder), exist_ok=True)
    rng = np.random.default_rng(args.seed)
    write_text(os.path.join(out, "labelmap.prototxt"), label_map_text())
    lists = {"trainval": write_split(rng, out, "trainval", 0, args.train, args.size),
             "test": write_split(rng, out, "test", args.train, args.test, args.size)}
    write_text(os.path.join(out, "test_name_size.txt"),
               "".join(f"{args.train + i:06d} {args.size} {args.size}\n"
                       for i in range(args.test)))
    LOG.info(f"Wrote {args.train} + {args.test} images and annotations to {out}")
    if args.db:
        for name, listfile in lists.items():
            convert(out, listfile, os.path.join(out, f"shapes_{name}_{args.backend}"),
                    args.backend)
    LOG.info(f"Done in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
