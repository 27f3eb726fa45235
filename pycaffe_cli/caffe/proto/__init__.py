"""``caffe.proto.caffe_pb2``: the engine's own generated module under BVLC's import path, so
messages built here and messages the engine reads are the same classes."""
import sys

from pycaffe_cli.proto import caffe_pb2

sys.modules[__name__ + ".caffe_pb2"] = caffe_pb2

__all__ = ["caffe_pb2"]
