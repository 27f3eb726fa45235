"""Caffe's protobuf schema (wire-compatible) and its generated module."""
