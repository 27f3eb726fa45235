"""What scripts/classify.py and scripts/detect.py (BVLC's python/*.py) share: reading their
flag values and files, and turning a user's mistake into one "prog: error: ..." line."""
import os
import sys

import numpy as np

from caffe._caffe import set_mode_cpu, set_mode_gpu
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.log import setup_logging

# BVLC keeps ImageNet's mean beside the package (python/caffe/imagenet); we do not ship it
DEFAULT_MEAN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "imagenet",
                            "ilsvrc_2012_mean.npy")
# What the scripts report as one line: their own checks, the engine's and the API's errors
USER_ERRORS = (CaffeError, ValueError, KeyError, OSError)


def caffenet_defaults(script_path):
    """BVLC's default --model_def and --pretrained_model for a script in scripts/: the
    reference CaffeNet in the repository's models/caffenet (its weights are the user's
    download)."""
    folder = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(script_path)),
                                           os.pardir, "models", "caffenet"))
    return (os.path.join(folder, "deploy.prototxt"),
            os.path.join(folder, "bvlc_reference_caffenet.caffemodel"))


def set_mode(gpu):
    """BVLC's scripts' --gpu switch, with the line they print."""
    if gpu:
        set_mode_gpu()
        print("GPU mode")
    else:
        set_mode_cpu()
        print("CPU mode")


class ScriptError(Exception):
    """A mistake in a script's arguments or inputs."""


def run(prog, action, args):
    """``action(args)`` with glog-style logging; a user's mistake prints one
    "prog: error: ..." line on stderr. Returns the exit status (0, or 1 on such a mistake)."""
    setup_logging()
    try:
        action(args)
    except (ScriptError,) + USER_ERRORS as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
        return 1
    return 0


def add_preprocessing_flags(parser, mean_layout):
    """The flags both scripts take for the Transformer, with BVLC's defaults and help:
    --mean_file (its layout as ``mean_layout`` in the help), --input_scale, --raw_scale,
    --channel_swap."""
    parser.add_argument("--mean_file", default=DEFAULT_MEAN,
                        help=f"Data set image mean of {mean_layout} dimensions (numpy "
                             "array). Set to '' for no mean subtraction.")
    parser.add_argument("--input_scale", type=float,
                        help="Multiply input features by this scale to finish preprocessing.")
    parser.add_argument("--raw_scale", type=float, default=255.0,
                        help="Multiply raw input by this scale before preprocessing.")
    parser.add_argument("--channel_swap", default="2,1,0",
                        help="Order to permute input channels. The default converts "
                             "RGB -> BGR since BGR is the Caffe default by way of OpenCV.")


def int_list(text, flag, count=None):
    """"2,1,0" -> [2, 1, 0]; ``count`` values when given."""
    try:
        values = [int(s) for s in text.split(",")]
    except ValueError:
        values = None
    if values is None or (count is not None and len(values) != count):
        shape = "'height,width'" if count == 2 else "comma-separated integers"
        raise ScriptError(f"{flag}: expected {shape}, got '{text}'")
    return values


def check_file(path, flag, default=None, hint=""):
    """A ScriptError naming ``flag`` when ``path`` is not a file (with ``hint`` when the path
    is the flag's ``default``)."""
    if not os.path.isfile(path):
        raise ScriptError(f"{flag}: {path} not found{hint if path == default else ''}")


def load_mean(path):
    """The mean array in the .npy file ``path``; None for ''."""
    if not path:
        return None
    if not os.path.isfile(path):
        why = " (ImageNet's mean is not shipped with pycaffe)" if path == DEFAULT_MEAN else ""
        raise ScriptError(f"--mean_file: {path} not found{why}; pass --mean_file '' for no "
                          "mean or your own .npy")
    try:
        return np.load(path)
    except (OSError, ValueError) as error:
        raise ScriptError(f"--mean_file: cannot read {path} as a numpy array: {error}") \
            from None


def check_model(model_def, pretrained_model, default_weights):
    """Both model files exist; the default weights' error says they must be downloaded."""
    check_file(model_def, "--model_def")
    check_file(pretrained_model, "--pretrained_model", default_weights,
               " (download the trained weights there, or pass --pretrained_model)")


def save_npy(path, array):
    """``np.save``'s file name (".npy" appended when missing), written atomically."""
    if not path.endswith(".npy"):
        path += ".npy"
    with atomic_write(path, "wb") as stream:
        np.save(stream, array)
