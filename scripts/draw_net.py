#!/usr/bin/env python3
"""Draw a graph of a net's architecture (BVLC Caffe's python/draw_net.py).

    python scripts/draw_net.py [--rankdir LR] [--phase ALL|TRAIN|TEST] [--display_lrm] \
        NET.prototxt OUTPUT.png

The image format follows the output file's extension (png, pdf, svg, ...; ``dot`` gives the
Graphviz source). Needs pydot (``pip install 'pycaffe[draw]'``) and Graphviz's ``dot``.
"""
import argparse
import os
import sys

from caffe import draw
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.prototxt import read_net_param
from pycaffe_cli.log import run_script
from pycaffe_cli.proto import caffe_pb2

PHASES = {"ALL": None, "TRAIN": caffe_pb2.TRAIN, "TEST": caffe_pb2.TEST}


def draw_net_file(input_net_proto_file, output_image_file, rankdir="LR", phase="ALL",
                  display_lrm=False):
    """Read a net prototxt and draw it to ``output_image_file``.

    Raises:
        CaffeError: unreadable prototxt, unknown phase, a layer with both include and exclude
            rules, pydot or Graphviz missing, or Graphviz failing on the output format.
    """
    if phase not in PHASES:
        raise CaffeError(f"Unknown phase: {phase} (expected TRAIN, TEST or ALL)")
    net = read_net_param(input_net_proto_file)
    print(f"Drawing net to {output_image_file}")
    try:
        draw.draw_net_to_file(net, output_image_file, rankdir, PHASES[phase], display_lrm)
    except ValueError as error:
        raise CaffeError(f"{input_net_proto_file}: {error}") from None
    except (ImportError, OSError) as error:
        raise CaffeError(str(error)) from None
    except AssertionError:
        # pydot's report of dot exiting non-zero; it has printed dot's own message.
        ext = output_image_file[output_image_file.rfind(".") + 1:]
        raise CaffeError(f"Graphviz's dot could not write {output_image_file} in the format "
                         f"{ext!r} (named by its extension; see dot's message above)") from None


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=os.path.basename(__file__), description="Draw a graph of the net architecture.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("input_net_proto_file", help="Input network prototxt file")
    parser.add_argument("output_image_file", help="Output image file")
    parser.add_argument("--rankdir", default="LR",
                        help="One of TB (top-bottom, i.e., vertical), RL (right-left, i.e., "
                             "horizontal), or another valid dot option; see "
                             "http://www.graphviz.org/doc/info/attrs.html#k:rankdir")
    parser.add_argument("--phase", default="ALL",
                        help="Which network phase to draw: can be TRAIN, TEST, or ALL. If "
                             "ALL, then all layers are drawn regardless of phase.")
    parser.add_argument("--display_lrm", action="store_true",
                        help="Use this flag to visualize the learning rate multiplier, when "
                             "non-zero, for the learning layers (Convolution, Deconvolution, "
                             "InnerProduct).")
    args = parser.parse_args(argv)
    return run_script(parser.prog, draw_net_file, args.input_net_proto_file,
                      args.output_image_file, args.rankdir, args.phase, args.display_lrm)


if __name__ == "__main__":
    sys.exit(main())
