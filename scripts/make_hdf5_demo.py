#!/usr/bin/env python3
"""Make the MLP demo's data set: three interleaved 2-d spirals, lifted to 16 features.

Writes ``train.h5`` / ``test.h5`` (datasets ``data`` float32 N x 16 and ``label`` float32 N)
and the list files ``train.txt`` / ``test.txt`` that an HDF5Data layer reads. Nothing is
downloaded; the same seed gives the same files.
"""
import argparse
import os

import numpy as np

from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.io.hdf5_image import write_hdf5_atomically

CLASSES = 3
FEATURES = 16


def spirals(count, rng):
    """Points on three noisy spiral arms (a classic non-linearly separable problem)."""
    labels = rng.integers(0, CLASSES, count)
    radius = rng.uniform(0.05, 1.0, count)
    angle = labels * (2 * np.pi / CLASSES) + radius * 4.0 + rng.normal(0, 0.15, count)
    points = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    return points, labels


def lift(points, projection):
    """Embed the 2-d points in FEATURES dims with a fixed random non-linear map."""
    return np.tanh(points @ projection).astype(np.float32)


def write_split(folder, name, data, labels):
    path = os.path.join(folder, f"{name}.h5")

    def fill(handle):
        handle.create_dataset("data", data=data)
        handle.create_dataset("label", data=labels.astype(np.float32))
    write_hdf5_atomically(path, fill)
    with atomic_write(os.path.join(folder, f"{name}.txt"), "w") as f:
        f.write(path + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/mlp", help="output folder")
    parser.add_argument("--train", type=int, default=6000, help="training examples")
    parser.add_argument("--test", type=int, default=1000, help="test examples")
    parser.add_argument("--seed", type=int, default=1701)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    projection = rng.normal(0, 1.5, (2, FEATURES))
    for name, count in (("train", args.train), ("test", args.test)):
        points, labels = spirals(count, rng)
        write_split(args.out, name, lift(points, projection), labels)
    print(f"wrote {args.train} training and {args.test} test examples to {args.out}")


if __name__ == "__main__":
    main()
