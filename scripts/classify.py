#!/usr/bin/env python3
"""Classify images with a trained net from the command line (BVLC's python/classify.py).

    python scripts/classify.py [flags] INPUT_FILE OUTPUT_FILE

INPUT_FILE is an image, a folder (its ``*.<--ext>`` images, in name order) or a ``.npy``
array of H x W x K images; OUTPUT_FILE receives the N x C array of class probabilities
(``np.save``; ".npy" is appended when missing). The flags and defaults are BVLC's: by
default the reference CaffeNet (models/caffenet/deploy.prototxt, weights in
models/caffenet/bvlc_reference_caffenet.caffemodel, which you download) with 10 oversampled
crops of 256 x 256 images, RGB -> BGR, raw scale 255 and the ImageNet mean (resized to the
net's input by the Transformer).

Where this differs from BVLC's script: ImageNet's mean file is not shipped (a missing
default --mean_file says so; pass --mean_file '' for no mean, or your own K x H x W .npy);
a folder's images are taken in name order; and a user's mistake (a missing file, a bad flag
value, an empty folder) is one "classify.py: error: ..." line with exit status 1 instead of
a traceback.
"""
import argparse
import glob
import os
import sys
import time

import numpy as np

from caffe import _scripts
from caffe._scripts import ScriptError

PROG = "classify.py"
DEFAULT_MODEL, DEFAULT_WEIGHTS = _scripts.caffenet_defaults(__file__)


def build_parser():
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n", 1)[0])
    parser.add_argument("input_file", help="Input image, directory, or npy.")
    parser.add_argument("output_file", help="Output npy filename.")
    parser.add_argument("--model_def", default=DEFAULT_MODEL, help="Model definition file.")
    parser.add_argument("--pretrained_model", default=DEFAULT_WEIGHTS,
                        help="Trained model weights file.")
    parser.add_argument("--gpu", action="store_true", help="Switch for gpu computation.")
    parser.add_argument("--center_only", action="store_true",
                        help="Switch for prediction from center crop alone instead of "
                             "averaging predictions across crops (default).")
    parser.add_argument("--images_dim", default="256,256",
                        help="Canonical 'height,width' dimensions of input images.")
    _scripts.add_preprocessing_flags(parser, "[Channels x Height x Width]")
    parser.add_argument("--ext", default="jpg",
                        help="Image file extension to take as input when a directory is "
                             "given as the input file.")
    return parser


def make_classifier(args):
    from caffe.classifier import Classifier
    image_dims = _scripts.int_list(args.images_dim, "--images_dim", count=2)
    channel_swap = None
    if args.channel_swap:
        channel_swap = _scripts.int_list(args.channel_swap, "--channel_swap")
    mean = _scripts.load_mean(args.mean_file)
    _scripts.check_model(args.model_def, args.pretrained_model, DEFAULT_WEIGHTS)
    return Classifier(args.model_def, args.pretrained_model, image_dims=image_dims, mean=mean,
                      input_scale=args.input_scale, raw_scale=args.raw_scale,
                      channel_swap=channel_swap)


def load_inputs(input_file, ext):
    """The images to classify: a .npy array, a folder's *.ext images, or one image."""
    from caffe import io as caffe_io
    input_file = os.path.expanduser(input_file)
    if input_file.endswith("npy"):
        print(f"Loading file: {input_file}")
        _scripts.check_file(input_file, "input_file")
        return np.load(input_file)
    if os.path.isdir(input_file):
        print(f"Loading folder: {input_file}")
        names = sorted(glob.glob(os.path.join(glob.escape(input_file), "*." + ext)))
        if not names:
            raise ScriptError(f"input_file: no *.{ext} images in folder {input_file} "
                              "(--ext sets the extension)")
        return [caffe_io.load_image(name) for name in names]
    print(f"Loading file: {input_file}")
    _scripts.check_file(input_file, "input_file")
    return [caffe_io.load_image(input_file)]


def classify(args):
    _scripts.set_mode(args.gpu)
    classifier = make_classifier(args)
    inputs = load_inputs(args.input_file, args.ext)
    print(f"Classifying {len(inputs)} inputs.")
    start = time.time()
    predictions = classifier.predict(inputs, not args.center_only)
    print(f"Done in {time.time() - start:.2f} s.")
    print(f"Saving results into {args.output_file}")
    _scripts.save_npy(args.output_file, predictions)


def main(argv=None):
    return _scripts.run(PROG, classify, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
