"""SSD's batch samplers: random crops that keep objects in view (SSD's Caffe fork,
util/sampler.cpp: GenerateBatchSamples, SampleBBox, SatisfySampleConstraint).

Each ``batch_sampler`` makes up to ``max_trials`` random boxes of the unit image: a scale
``s`` uniform in [min_scale, max_scale], an aspect ratio ``a`` uniform in [min_aspect_ratio,
max_aspect_ratio] and clamped to [s^2, 1 / s^2], width ``s * sqrt(a)``, height ``s / sqrt(a)``
and a top-left corner uniform where the box fits. A box is kept when it meets the sampler's
``sample_constraint`` (no constraint: always), at most ``max_sample`` boxes per sampler. The
AnnotatedData layer then crops the image to one of the kept boxes, chosen uniformly.

The constraint test is the fork's, quirk included: for each object in turn, the first test the
constraint sets (Jaccard overlap, then sample coverage, then object coverage) is what decides;
a box passes when that first test passes for some object, whatever the later tests say.
An image without objects passes no constraint.

All trials of a sampler are drawn at once, so a sampler with ``max_sample`` draws its whole
``max_trials`` even when it stops early (the fork stops drawing); the boxes it keeps are still
the first ``max_sample`` that pass, in order.
"""
import numpy as np

from pycaffe_cli.data.annotation import F32, box_sizes, intersect

_CONSTRAINT_TESTS = (("min_jaccard_overlap", "max_jaccard_overlap"),
                     ("min_sample_coverage", "max_sample_coverage"),
                     ("min_object_coverage", "max_object_coverage"))


def check_batch_sampler(batch_sampler):
    """The fork's CHECKs on a caffe.BatchSampler, as one sentence, or None when it is valid."""
    sampler = batch_sampler.sampler
    if not 0 < sampler.min_scale <= sampler.max_scale <= 1:
        return (f"batch_sampler needs 0 < min_scale <= max_scale <= 1 (got min_scale "
                f"{sampler.min_scale:g}, max_scale {sampler.max_scale:g})")
    if not 0 < sampler.min_aspect_ratio <= sampler.max_aspect_ratio < np.finfo(F32).max:
        return (f"batch_sampler needs 0 < min_aspect_ratio <= max_aspect_ratio (got "
                f"{sampler.min_aspect_ratio:g} and {sampler.max_aspect_ratio:g})")
    return None


def sample_boxes(sampler, count, rng):
    """SampleBBox, ``count`` times: (count, 4) float32 boxes inside the unit square."""
    scale = rng.uniform(sampler.min_scale, sampler.max_scale, count).astype(F32)
    aspect = rng.uniform(sampler.min_aspect_ratio, sampler.max_aspect_ratio,
                         count).astype(F32)
    square = (scale.astype(np.float64) ** 2)
    aspect = np.maximum(aspect, square.astype(F32))
    aspect = np.minimum(aspect, (1 / square).astype(F32))
    root = np.sqrt(aspect)
    width = np.minimum(scale * root, F32(1))
    height = np.minimum(scale / root, F32(1))
    w_off = (rng.random(count) * (F32(1) - width)).astype(F32)
    h_off = (rng.random(count) * (F32(1) - height)).astype(F32)
    return np.stack([w_off, h_off, w_off + width, h_off + height], axis=1).astype(F32)


def _overlaps(samples, objects, sizes, kind):
    """(S, O) float32: JaccardOverlap(sample, object) for kind "jaccard", BBoxCoverage(sample,
    object) for "sample", BBoxCoverage(object, sample) for "object"."""
    out = np.zeros((len(samples), len(objects)), F32)
    sample_sizes = box_sizes(samples)
    object_sizes = box_sizes(objects, sizes)
    for j, obj in enumerate(objects):
        inter = intersect(samples, obj)
        width = inter[:, 2] - inter[:, 0]
        height = inter[:, 3] - inter[:, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            if kind == "jaccard":
                inter_size = width * height
                ratio = inter_size / (sample_sizes + object_sizes[j] - inter_size)
                out[:, j] = np.where((width > 0) & (height > 0), ratio, F32(0))
            else:
                inter_size = box_sizes(inter)
                own = sample_sizes if kind == "sample" else object_sizes[j]
                out[:, j] = np.where(inter_size > 0, inter_size / own, F32(0))
    return out


def satisfy_constraint(samples, objects, sizes, constraint):
    """SatisfySampleConstraint for each of (S, 4) ``samples``: (S,) bool."""
    samples = np.asarray(samples, F32).reshape(-1, 4)
    present = [(low, high) for low, high in _CONSTRAINT_TESTS
               if constraint.HasField(low) or constraint.HasField(high)]
    if not present:
        return np.ones(len(samples), bool)
    if len(objects) == 0:
        return np.zeros(len(samples), bool)
    low, high = present[0]   # the first test decides (see the module docstring)
    kind = {"min_jaccard_overlap": "jaccard", "min_sample_coverage": "sample",
            "min_object_coverage": "object"}[low]
    values = _overlaps(samples, np.asarray(objects, F32).reshape(-1, 4), sizes, kind)
    passes = np.ones(values.shape, bool)
    if constraint.HasField(low):
        passes &= ~(values < F32(getattr(constraint, low)))
    if constraint.HasField(high):
        passes &= ~(values > F32(getattr(constraint, high)))
    return passes.any(axis=1)


def generate_batch_samples(boxes, batch_samplers, rng):
    """GenerateBatchSamples: the boxes all ``batch_samplers`` keep for an image whose objects
    are ``boxes`` (pycaffe_cli.data.annotation.Boxes). Returns (K, 4) float32."""
    found = []
    for batch_sampler in batch_samplers:
        if not batch_sampler.use_original_image or batch_sampler.max_trials <= 0:
            continue
        samples = sample_boxes(batch_sampler.sampler, batch_sampler.max_trials, rng)
        good = samples[satisfy_constraint(samples, boxes.coords, boxes.size,
                                          batch_sampler.sample_constraint)]
        if batch_sampler.HasField("max_sample"):
            good = good[:batch_sampler.max_sample]
        found.append(good)
    return np.concatenate(found).astype(F32) if found else np.zeros((0, 4), F32)
