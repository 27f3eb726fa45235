"""pycaffe: BVLC Caffe rebuilt in Python."""
