"""SSD's batch samplers (util/sampler.cpp): the sampled boxes' scale and aspect ratio, the
constraints over many draws, the first-test-decides quirk, max_sample and seeded repeats."""
import numpy as np
import pytest

from pycaffe_cli.data.annotation import Boxes
from pycaffe_cli.detection.sampling import (check_batch_sampler, generate_batch_samples,
                                            sample_boxes, satisfy_constraint)
from pycaffe_cli.proto import caffe_pb2

F32 = np.float32


def objects(coords):
    coords = np.array(coords, F32).reshape(-1, 4)
    count = len(coords)
    return Boxes(coords, np.full(count, np.nan, F32), np.ones(count, np.int64),
                 np.zeros(count, np.int64), np.zeros(count, bool))


def jaccard(a, b):
    """A float64 reference."""
    inter_w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    inter_h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = inter_w * inter_h
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def test_sampled_boxes_have_the_scale_and_aspect_ratio():
    sampler = caffe_pb2.Sampler(min_scale=0.3, max_scale=0.9, min_aspect_ratio=0.5,
                                max_aspect_ratio=2.0)
    samples = sample_boxes(sampler, 2000, np.random.default_rng(0)).astype(np.float64)
    width, height = samples[:, 2] - samples[:, 0], samples[:, 3] - samples[:, 1]
    scale, aspect = np.sqrt(width * height), width / height
    assert (scale >= 0.3 - 1e-6).all() and (scale <= 0.9 + 1e-6).all()
    # the aspect ratio is clamped to [scale^2, 1 / scale^2]
    low = np.maximum(0.5, scale ** 2)
    high = np.minimum(2.0, 1 / scale ** 2)
    assert (aspect >= low * (1 - 1e-5)).all() and (aspect <= high * (1 + 1e-5)).all()
    assert (samples >= 0).all() and (samples <= 1 + 1e-6).all()
    assert scale.min() < 0.35 and scale.max() > 0.85   # the range is used
    # the default sampler is the whole image
    whole = sample_boxes(caffe_pb2.Sampler(), 3, np.random.default_rng(1))
    np.testing.assert_array_equal(whole, np.tile([0, 0, 1, 1], (3, 1)))


@pytest.mark.parametrize("field, value", [("min_jaccard_overlap", 0.5),
                                          ("max_jaccard_overlap", 0.3)])
def test_jaccard_constraints_hold_over_many_draws(field, value):
    truth = objects([[0.1, 0.1, 0.5, 0.6], [0.6, 0.5, 0.9, 0.95]])
    batch_sampler = caffe_pb2.BatchSampler(max_trials=500)
    batch_sampler.sampler.min_scale, batch_sampler.sampler.max_scale = 0.3, 1.0
    batch_sampler.sampler.min_aspect_ratio = 0.5
    batch_sampler.sampler.max_aspect_ratio = 2.0
    setattr(batch_sampler.sample_constraint, field, value)
    samples = generate_batch_samples(truth, [batch_sampler], np.random.default_rng(2))
    assert len(samples) > 10
    for sample in samples:
        overlaps = [jaccard(sample, obj) for obj in truth.coords]
        if field == "min_jaccard_overlap":
            assert max(overlaps) >= value - 1e-6
        else:
            assert min(overlaps) <= value + 1e-6


def test_coverage_constraints():
    truth = objects([[0.2, 0.2, 0.4, 0.4]])
    samples = np.array([[0.0, 0.0, 1.0, 1.0], [0.3, 0.3, 0.5, 0.5], [0.6, 0.6, 0.9, 0.9]], F32)
    object_cover = caffe_pb2.SampleConstraint(min_object_coverage=0.9)
    np.testing.assert_array_equal(
        satisfy_constraint(samples, truth.coords, truth.size, object_cover),
        [True, False, False])
    sample_cover = caffe_pb2.SampleConstraint(min_sample_coverage=0.2)
    np.testing.assert_array_equal(
        satisfy_constraint(samples, truth.coords, truth.size, sample_cover),
        [False, True, False])


def test_the_first_constraint_decides_and_no_objects_fail():
    """The fork returns true once the first test it checks passes for an object, even when a
    later test of the same constraint fails."""
    truth = objects([[0.0, 0.0, 0.5, 0.5]])
    sample = np.array([[0.0, 0.0, 0.5, 1.0]], F32)   # jaccard 0.5, object coverage 1
    constraint = caffe_pb2.SampleConstraint(min_jaccard_overlap=0.4, max_object_coverage=0.5)
    assert satisfy_constraint(sample, truth.coords, truth.size, constraint)[0]
    constraint = caffe_pb2.SampleConstraint(min_jaccard_overlap=0.6, max_object_coverage=1.0)
    assert not satisfy_constraint(sample, truth.coords, truth.size, constraint)[0]
    none = objects(np.zeros((0, 4)))
    assert not satisfy_constraint(sample, none.coords, none.size, constraint)[0]
    assert satisfy_constraint(sample, none.coords, none.size, caffe_pb2.SampleConstraint())[0]


def test_max_sample_use_original_image_and_seeds():
    truth = objects([[0.1, 0.1, 0.5, 0.6]])
    samplers = [caffe_pb2.BatchSampler(max_sample=1, max_trials=1),
                caffe_pb2.BatchSampler(max_sample=3, max_trials=50,
                                       sampler=caffe_pb2.Sampler(min_scale=0.3)),
                caffe_pb2.BatchSampler(use_original_image=False)]
    first = generate_batch_samples(truth, samplers, np.random.default_rng(7))
    assert first.shape == (4, 4) and first.dtype == F32
    np.testing.assert_array_equal(first[0], [0, 0, 1, 1])
    np.testing.assert_array_equal(first, generate_batch_samples(truth, samplers,
                                                                np.random.default_rng(7)))
    assert generate_batch_samples(truth, [], np.random.default_rng(7)).shape == (0, 4)


def test_sampler_checks():
    assert check_batch_sampler(caffe_pb2.BatchSampler()) is None
    bad = caffe_pb2.BatchSampler(sampler=caffe_pb2.Sampler(min_scale=0))
    assert "min_scale" in check_batch_sampler(bad)
    bad = caffe_pb2.BatchSampler(sampler=caffe_pb2.Sampler(min_aspect_ratio=2))
    assert "aspect_ratio" in check_batch_sampler(bad)
