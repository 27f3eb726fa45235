#!/usr/bin/env python3
"""Windowed detection with a trained net from the command line (BVLC's python/detect.py).

    python scripts/detect.py [flags] INPUT_FILE OUTPUT_FILE

INPUT_FILE is a .txt list of image files (one per line; their windows come from Selective
Search) or a .csv with the header columns filename, ymin, xmin, ymax, xmax (one window a
row; ``--crop_mode list``). Every window is cut out with ``--context_pad`` pixels of context,
warped to the net's input and classified (R-CNN style). The flags and defaults are BVLC's;
the default model is the reference CaffeNet (models/caffenet/, weights downloaded by you).

OUTPUT_FILE by extension: .csv gets one row per window (filename, ymin, xmin, ymax, xmax,
class0, class1, ...), which is what BVLC's script means to write (its .csv branch does not
run); anything else gets HDF5 with the datasets filename, window (N x 4, the columns above)
and prediction (N x classes), written with h5py (BVLC writes a pandas/PyTables table, which
needs packages pycaffe does not depend on). Selective Search needs the external
selective_search_ijcv_with_python module (and MATLAB); a missing one is a one-line error.
As in scripts/classify.py, ImageNet's mean file is not shipped (pass --mean_file '' or your
own .npy) and a user's mistake is one "detect.py: error: ..." line with exit status 1.
"""
import argparse
import csv
import sys
import time

import numpy as np

from caffe import _scripts
from caffe._scripts import ScriptError
from pycaffe_cli.io.files import atomic_output_path, atomic_write

PROG = "detect.py"
CROP_MODES = ["list", "selective_search"]
COORD_COLS = ["ymin", "xmin", "ymax", "xmax"]
DEFAULT_MODEL, DEFAULT_WEIGHTS = _scripts.caffenet_defaults(__file__)


def build_parser():
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n", 1)[0])
    parser.add_argument("input_file",
                        help="Input txt/csv filename. If .txt, must be list of filenames. If "
                             ".csv, must be comma-separated file with header 'filename, "
                             "xmin, ymin, xmax, ymax'")
    parser.add_argument("output_file",
                        help="Output h5/csv filename. Format depends on extension.")
    parser.add_argument("--model_def", default=DEFAULT_MODEL, help="Model definition file.")
    parser.add_argument("--pretrained_model", default=DEFAULT_WEIGHTS,
                        help="Trained model weights file.")
    parser.add_argument("--crop_mode", default="selective_search", choices=CROP_MODES,
                        help="How to generate windows for detection.")
    parser.add_argument("--gpu", action="store_true", help="Switch for gpu computation.")
    _scripts.add_preprocessing_flags(parser, "H x W x K")
    parser.add_argument("--context_pad", type=int, default=16,
                        help="Amount of surrounding context to collect in input window.")
    return parser


def make_detector(args):
    from caffe.detector import Detector
    mean = _scripts.load_mean(args.mean_file)
    if mean is not None and mean.ndim == 3 and mean.shape[1:] != (1, 1):
        mean = mean.mean(1).mean(1)  # BVLC's detect.py subtracts per-channel means
    channel_swap = None
    if args.channel_swap:
        channel_swap = _scripts.int_list(args.channel_swap, "--channel_swap")
    _scripts.check_model(args.model_def, args.pretrained_model, DEFAULT_WEIGHTS)
    return Detector(args.model_def, args.pretrained_model, mean=mean,
                    input_scale=args.input_scale, raw_scale=args.raw_scale,
                    channel_swap=channel_swap, context_pad=args.context_pad)


def read_list(path):
    """The image files of a .txt list, one per line (blank lines skipped)."""
    with open(path, encoding="utf-8") as stream:
        return [line.strip() for line in stream if line.strip()]


def read_windows(path):
    """[(filename, N x 4 int array of ymin, xmin, ymax, xmax)] of a .csv, in first-seen
    order of the files."""
    windows = {}
    with open(path, newline="", encoding="utf-8") as stream:
        reader = csv.DictReader(stream, skipinitialspace=True)
        missing = [c for c in ["filename"] + COORD_COLS if c not in (reader.fieldnames or [])]
        if missing:
            raise ScriptError(f"input_file: {path} has no column(s) {', '.join(missing)} "
                              f"(its header needs filename, {', '.join(COORD_COLS)})")
        for line, row in enumerate(reader, 2):
            try:
                box = [int(row[c]) for c in COORD_COLS]
            except (TypeError, ValueError):
                raise ScriptError(f"input_file: {path}:{line}: window coordinates must be "
                                  "integers") from None
            windows.setdefault(row["filename"], []).append(box)
    return [(name, np.array(boxes)) for name, boxes in windows.items()]


def detect(detector, input_file, crop_mode):
    lowered = input_file.lower()
    if not lowered.endswith(("txt", "csv")):
        raise ScriptError(f"input_file: {input_file}: unknown input file type: not in txt "
                          "or csv")
    _scripts.check_file(input_file, "input_file")
    if crop_mode == "list":
        if not lowered.endswith("csv"):
            raise ScriptError("--crop_mode list needs a .csv input_file with the windows")
        return detector.detect_windows(read_windows(input_file))
    if lowered.endswith("csv"):
        images = [name for name, _ in read_windows(input_file)]
    else:
        images = read_list(input_file)
    try:
        return detector.detect_selective_search(images)
    except ImportError as error:
        raise ScriptError(f"--crop_mode selective_search: {error}") from None


def save(path, detections):
    names = [d["filename"] for d in detections]
    windows = np.array([np.asarray(d["window"]).reshape(-1)[:4] for d in detections])
    predictions = np.array([np.asarray(d["prediction"]).reshape(-1) for d in detections])
    if path.lower().endswith("csv"):
        class_cols = [f"class{x}" for x in range(predictions.shape[1])]
        with atomic_write(path, "w") as stream:
            writer = csv.writer(stream, lineterminator="\n")
            writer.writerow(["filename"] + COORD_COLS + class_cols)
            for name, window, prediction in zip(names, windows, predictions):
                writer.writerow([name] + window.tolist() + [repr(float(p)) for p in prediction])
        return
    import h5py
    with atomic_output_path(path) as temporary:
        with h5py.File(temporary, "w") as h5:
            h5.create_dataset("filename", data=names, dtype=h5py.string_dtype())
            h5.create_dataset("window", data=windows.astype(np.int64))
            h5["window"].attrs["columns"] = COORD_COLS
            h5.create_dataset("prediction", data=predictions.astype(np.float32))


def run(args):
    _scripts.set_mode(args.gpu)
    detector = make_detector(args)
    start = time.time()
    print("Loading input...")
    detections = detect(detector, args.input_file, args.crop_mode)
    print(f"Processed {len(detections)} windows in {time.time() - start:.3f} s.")
    start = time.time()
    save(args.output_file, detections)
    print(f"Saved to {args.output_file} in {time.time() - start:.3f} s.")


def main(argv=None):
    return _scripts.run(PROG, run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
