#!/usr/bin/env python3
"""Generate a local MNIST-like digits dataset: 28x28 gray, white digits on black, 10 classes.

No font files and no downloads: each digit is a hand-written stroke skeleton (polylines and
arcs in a unit box, a few style variants per digit). Every sample moves the skeleton's points
through a smooth random warp (sums of low-frequency sine waves: an "elastic" jitter) and a
random affine map (rotation within +-15 degrees, scale 0.8-1.2 with some aspect change, shear,
translation), draws the strokes with Pillow at 4x with a random pen width, box-filters down
to 28x28, scales the ink and adds noise. The same --seed gives the same bytes.

Writes, under --out, ``digits_train_lmdb`` and ``digits_test_lmdb`` (keys "%08d", raw uint8
Datums 1x28x28 with the label), and with --idx also MNIST's IDX files
(``train-images-idx3-ubyte`` ...) for scripts/convert_mnist.py.

    python scripts/make_digits.py --out data/digits [--train 10000] [--test 2000] [--idx]
"""
import argparse
import os
import sys
import time

import numpy as np
from PIL import Image, ImageDraw

from pycaffe_cli.data.db import backend_from_name
from pycaffe_cli.data.image_datum import DatumWriter
from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.log import LOG, run_script
from pycaffe_cli.proto import caffe_pb2

SIZE = 28
SUPERSAMPLE = 4
CLASSES = 10
BOX_ORIGIN, BOX_SIZE = 4.0, 20.0  # the unit box maps to pixels [4, 24], as MNIST's 20x20
IDX_IMAGES, IDX_LABELS = 2051, 2049


def arc(cx, cy, rx, ry, start, stop, points=20):
    """Points on an ellipse from angle ``start`` to ``stop`` (degrees; y points down, so
    increasing angles turn clockwise on screen)."""
    t = np.radians(np.linspace(start, stop, points))
    return np.stack([cx + rx * np.cos(t), cy + ry * np.sin(t)], axis=1)


def line(*points):
    return np.array(points, float)


def bezier(start, control, stop, points=12):
    """A quadratic Bezier curve from ``start`` to ``stop``, pulled towards ``control``."""
    t = np.linspace(0, 1, points)[:, None]
    start, control, stop = (np.array(p, float) for p in (start, control, stop))
    return (1 - t) ** 2 * start + 2 * t * (1 - t) * control + t ** 2 * stop


def join(*parts):
    return np.concatenate(parts)


# Each digit: style variants; each variant: strokes; each stroke: (K, 2) points in [0, 1]^2.
GLYPHS = {
    0: [[arc(0.5, 0.5, 0.24, 0.38, -100, 265)],
        [arc(0.5, 0.5, 0.2, 0.4, -80, 290)]],
    1: [[line((0.52, 0.1), (0.5, 0.9))],
        [line((0.34, 0.28), (0.54, 0.1), (0.5, 0.9))],
        [line((0.34, 0.26), (0.53, 0.1), (0.5, 0.9)), line((0.34, 0.9), (0.68, 0.9))]],
    2: [[join(arc(0.5, 0.32, 0.23, 0.21, 195, 380), line((0.66, 0.5), (0.25, 0.9),
                                                        (0.78, 0.9)))],
        [join(arc(0.48, 0.3, 0.22, 0.2, 180, 390), arc(0.3, 0.83, 0.1, 0.07, -60, 180),
              line((0.34, 0.82), (0.8, 0.88)))]],
    3: [[arc(0.47, 0.3, 0.22, 0.19, 200, 450), arc(0.47, 0.68, 0.25, 0.22, -90, 150)],
        [join(line((0.26, 0.1), (0.72, 0.1), (0.44, 0.42)),
              arc(0.47, 0.66, 0.25, 0.24, -75, 150))]],
    4: [[line((0.64, 0.9), (0.64, 0.1), (0.2, 0.64), (0.8, 0.64))],
        [line((0.3, 0.1), (0.24, 0.62), (0.8, 0.62)), line((0.64, 0.28), (0.62, 0.9))]],
    5: [[join(line((0.74, 0.1), (0.33, 0.1), (0.3, 0.45)),
              arc(0.49, 0.65, 0.24, 0.24, -125, 145))],
        [line((0.34, 0.1), (0.3, 0.46)), line((0.34, 0.1), (0.76, 0.1)),
         arc(0.5, 0.66, 0.23, 0.23, -130, 150)]],
    6: [[join(arc(0.74, 0.56, 0.44, 0.46, 240, 180), arc(0.51, 0.68, 0.21, 0.21, 180, 540))],
        [join(line((0.64, 0.1), (0.38, 0.48)), arc(0.52, 0.69, 0.21, 0.2, 215, 575))]],
    7: [[line((0.24, 0.12), (0.77, 0.12), (0.44, 0.9))],
        [line((0.24, 0.12), (0.77, 0.12), (0.44, 0.9)), line((0.37, 0.5), (0.7, 0.5))],
        [join(line((0.24, 0.16)), bezier((0.78, 0.12), (0.52, 0.42), (0.42, 0.9)))]],
    8: [[arc(0.5, 0.29, 0.18, 0.18, 90, 450), arc(0.5, 0.7, 0.23, 0.2, -90, 270)],
        [join(arc(0.5, 0.29, 0.19, 0.19, 45, 320), arc(0.5, 0.7, 0.22, 0.2, -120, 225),
              line((0.63, 0.14)))]],
    9: [[arc(0.49, 0.33, 0.21, 0.21, 0, 360), line((0.7, 0.33), (0.62, 0.9))],
        [join(arc(0.48, 0.34, 0.21, 0.21, -10, 350),
              bezier((0.69, 0.3), (0.68, 0.7), (0.4, 0.9))[1:])]],
}


def _templates():
    """[(label, points (M, 2) in pixels, stroke end offsets)] for every style variant."""
    templates = []
    for label, variants in GLYPHS.items():
        for strokes in variants:
            points = BOX_ORIGIN + BOX_SIZE * np.concatenate(strokes)
            ends = np.cumsum([len(s) for s in strokes])
            templates.append((label, points, ends))
    return templates


def _smooth_warp(rng, points, count):
    """A per-sample smooth displacement of the points: two sine waves per axis."""
    waves = 2
    shape = (count, 1, waves)
    frequency = rng.uniform(0.15, 0.45, (count, waves, 2))  # radians per pixel
    phase = rng.uniform(0, 2 * np.pi, shape)
    amplitude = rng.uniform(0.3, 1.1, (count, 2, waves))  # pixels
    angle = np.einsum("mk,nwk->nmw", points, frequency) + phase
    return points[None] + np.einsum("nmw,naw->nma", np.sin(angle), amplitude)


def _affine(rng, points):
    """Random rotation, scale (with some aspect change), shear and shift about the centre."""
    count = len(points)
    theta = np.radians(rng.uniform(-15, 15, count))
    scale = rng.uniform(0.8, 1.2, count)
    aspect = rng.uniform(0.88, 1.12, count)
    shear = rng.uniform(-0.3, 0.3, count)
    shift = rng.uniform(-2.5, 2.5, (count, 1, 2))
    cos, sin = np.cos(theta), np.sin(theta)
    rotate = np.stack([np.stack([cos, -sin], -1), np.stack([sin, cos], -1)], -2)
    stretch = np.zeros((count, 2, 2))
    stretch[:, 0, 0] = scale * aspect
    stretch[:, 0, 1] = shear * scale / aspect
    stretch[:, 1, 1] = scale / aspect
    matrix = rotate @ stretch
    centre = SIZE / 2
    return np.einsum("nij,nmj->nmi", matrix, points - centre) + centre + shift


def _draw(points, ends, width):
    """Draw the strokes at SUPERSAMPLE x, round-capped, and box-filter down to 28x28."""
    canvas = Image.new("L", (SIZE * SUPERSAMPLE, SIZE * SUPERSAMPLE), 0)
    pen = ImageDraw.Draw(canvas)
    scaled = points * SUPERSAMPLE
    radius = width * SUPERSAMPLE / 2
    start = 0
    for end in ends:
        stroke = [tuple(p) for p in scaled[start:end]]
        pen.line(stroke, fill=255, width=max(1, int(round(2 * radius))), joint="curve")
        for x, y in (stroke[0], stroke[-1]):
            pen.ellipse((x - radius, y - radius, x + radius, y + radius), fill=255)
        start = end
    return np.asarray(canvas.reduce(SUPERSAMPLE), np.float32)


def render(labels, rng):
    """(N, 28, 28) uint8 images of the given labels."""
    images = np.zeros((len(labels), SIZE, SIZE), np.float32)
    variant_of = {label: [] for label in range(CLASSES)}
    templates = _templates()
    for index, (label, _, _) in enumerate(templates):
        variant_of[label].append(index)
    choice = np.array([rng.choice(variant_of[label]) for label in labels])
    for index, (_, points, ends) in enumerate(templates):
        members = np.flatnonzero(choice == index)
        if not members.size:
            continue
        moved = _affine(rng, _smooth_warp(rng, points, members.size))
        widths = rng.uniform(1.5, 3.2, members.size)
        for sample, sample_points, width in zip(members, moved, widths):
            images[sample] = _draw(sample_points, ends, width)
    ink = rng.uniform(0.7, 1.0, (len(labels), 1, 1))
    noise = rng.normal(0, 10, images.shape)
    return np.clip(np.rint(images * ink + noise), 0, 255).astype(np.uint8)


def balanced_labels(rng, count):
    """``count`` labels, each class equally often (up to one), in random order."""
    return rng.permutation(np.arange(count) % CLASSES).astype(np.uint8)


def make_split(rng, count):
    labels = balanced_labels(rng, count)
    return render(labels, rng), labels


def write_lmdb(path, images, labels, backend):
    datum = caffe_pb2.Datum(channels=1, height=SIZE, width=SIZE)
    with DatumWriter(path, backend, log_progress=False) as writer:
        for index, (image, label) in enumerate(zip(images, labels)):
            datum.data = image.tobytes()
            datum.label = int(label)
            writer.put(f"{index:08d}", datum)
    LOG.info(f"Wrote {len(labels)} digits to {path}")


def write_idx(path, array, magic):
    """An IDX file (MNIST's format): big-endian magic, dimensions, then the uint8 data."""
    header = np.array([magic, *array.shape], ">u4").tobytes()
    with atomic_write(path, "wb") as stream:
        stream.write(header + np.ascontiguousarray(array, np.uint8).tobytes())


def main(argv=None):
    parser = argparse.ArgumentParser(prog=os.path.basename(__file__),
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data/digits", help="output folder")
    parser.add_argument("--train", type=int, default=10000, help="training images")
    parser.add_argument("--test", type=int, default=2000, help="test images")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--backend", default="lmdb", choices=["lmdb", "leveldb"])
    parser.add_argument("--idx", action="store_true",
                        help="also write MNIST IDX files (train-images-idx3-ubyte, ...)")
    args = parser.parse_args(argv)
    if args.train < 1 or args.test < 1:
        parser.error("--train and --test need at least one image each")
    return run_script(parser.prog, generate, args)


def generate(args):
    started = time.perf_counter()
    backend = backend_from_name(args.backend)
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    splits = {"train": make_split(rng, args.train), "test": make_split(rng, args.test)}
    for name, (images, labels) in splits.items():
        write_lmdb(os.path.join(args.out, f"digits_{name}_{args.backend}"), images, labels,
                   backend)
    if args.idx:
        for name, prefix in (("train", "train"), ("test", "t10k")):
            images, labels = splits[name]
            write_idx(os.path.join(args.out, f"{prefix}-images-idx3-ubyte"), images,
                      IDX_IMAGES)
            write_idx(os.path.join(args.out, f"{prefix}-labels-idx1-ubyte"), labels,
                      IDX_LABELS)
        LOG.info(f"Wrote IDX files to {args.out}")
    LOG.info(f"Done in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
