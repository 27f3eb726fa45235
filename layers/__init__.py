"""Caffe layer implementations: one module per prototxt layer type."""
