"""Accuracy: top-k classification accuracy (Caffe's AccuracyLayer).

Scores (bottom 0) viewed as (outer, C, inner) along ``accuracy_param.axis``; labels (bottom 1)
hold outer*inner integers. A non-ignored label l at (i, j) counts as correct when fewer than
``top_k`` other classes score at least as high as the true class:

    #{c != l : x[i, c, j] >= x[i, l, j]} < top_k

(ties therefore count against the prediction, as in Caffe). Top 0 is correct / counted
(0 when nothing is counted); the optional top 1 holds, per class, the accuracy over the
locations labelled with that class (0 for classes that do not occur).

In GPU mode one thread per location ranks its true class, the hits are added on the device
into top 0, and one thread per class gathers the per-class accuracy; only the label counts
come to the host (the denominator, and the out-of-range check), as Caffe syncs its count.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.kernels.cuda import loss as gpu
from pycaffe_cli.layers.softmax_with_loss import count_labels_gpu, gather_labels, ignore_args
from pycaffe_cli.layers.views import layer_axis, three_axis_view


@register("Accuracy", v1="ACCURACY")
class AccuracyLayer(Layer):
    """Fraction of labels ranked within the top k scores; no backward."""

    exact_num_bottom = 2
    min_num_top = 1
    max_num_top = 2

    def layer_setup(self, bottom, top):
        p = self.param.accuracy_param
        self.top_k = p.top_k
        self.ignore_label = p.ignore_label if p.HasField("ignore_label") else None
        self._gpu_hits = Blob()  # GPU: 1 where the location's label is within the top k

    def reshape(self, bottom, top):
        label_count = bottom[1].count()
        if label_count == 0 or self.top_k > bottom[0].count() // label_count:
            raise self.error(f"top_k ({self.top_k}) must be less than or equal to the number "
                             f"of classes")
        self.axis = layer_axis(self, bottom[0], self.param.accuracy_param.axis)
        self.outer = bottom[0].count(0, self.axis)
        self.inner = bottom[0].count(self.axis + 1)
        if self.outer * self.inner != label_count:
            raise self.error(
                f"number of labels must match number of predictions: with label axis "
                f"{self.axis} and predictions {bottom[0].shape_string()} the label blob must "
                f"hold {self.outer * self.inner} values, but {bottom[1].shape_string()} holds "
                f"{label_count}")
        top[0].reshape(())
        if len(top) > 1:
            top[1].reshape((bottom[0].shape[self.axis],))
        self._gpu_hits.reshape((label_count,))

    def forward_cpu(self, bottom, top):
        scores = three_axis_view(bottom[0].data, self.axis)
        num_classes = scores.shape[1]
        labels, valid = gather_labels(self, bottom[1], self.outer, self.inner, num_classes,
                                      self.ignore_label)
        true_score = np.take_along_axis(scores, labels[:, None, :], axis=1)
        # the true class itself is among the scores >= its own, hence the - 1
        better = (scores >= true_score).sum(axis=1) - 1
        correct = (better < self.top_k) & valid
        count = int(valid.sum())
        top[0].data[...] = correct.sum() / count if count else 0.0
        if len(top) > 1:
            seen = np.bincount(labels[valid], minlength=num_classes)
            hits = np.bincount(labels[correct], minlength=num_classes)
            top[1].data[...] = np.where(seen > 0, hits / np.maximum(seen, 1), 0.0)

    def backward_cpu(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("Accuracy layer cannot backpropagate (it is not a loss)")

    def allow_force_backward(self, bottom_index):
        # Caffe would abort on force_backward reaching this layer; we keep it out instead
        return False

    def forward_gpu(self, bottom, top):
        positions = self.outer * self.inner
        num_classes = bottom[0].shape[self.axis]
        labels = bottom[1].gpu_data
        count = count_labels_gpu(self, bottom[1], num_classes, self.ignore_label)
        ignore, has_ignore = ignore_args(self.ignore_label)
        hits = self._gpu_hits.mutable_gpu_data
        launch(_hits_kernel, positions, bottom[0].gpu_data, labels, num_classes,
               self.inner, self.top_k, ignore, has_ignore, hits)
        gpu.sum_into(positions, hits, max(count, 1), top[0].mutable_gpu_data)
        if len(top) > 1:
            launch(_per_class_kernel, num_classes, labels, self._gpu_hits.gpu_data,
                   positions, ignore, has_ignore, top[1].mutable_gpu_data)

    def backward_gpu(self, top, propagate_down, bottom):
        # nothing to compute, nor to copy: only the check (and no CPU-fallback log line)
        self.backward_cpu(top, propagate_down, bottom)


@cuda.jit(cache=True)
def _hits_kernel(n, scores, labels, channels, inner, top_k, ignore, has_ignore, hits):
    """hits[p] = 1 when fewer than top_k other classes score >= the true class at p."""
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        label = gpu.label_class(labels[index], channels, ignore, has_ignore)
        hit = np.float32(0)
        if label >= 0:
            start = index // inner * channels * inner + index % inner
            true_score = scores[start + label * inner]
            better = 0
            for c in range(channels):
                if c != label and scores[start + c * inner] >= true_score:
                    better += 1
            if better < top_k:
                hit = np.float32(1)
        hits[index] = hit


@cuda.jit(cache=True)
def _per_class_kernel(n, labels, hits, positions, ignore, has_ignore, accuracy):
    """accuracy[c] = hits / locations labelled c (0 when there are none)."""
    for c in range(cuda.grid(1), n, cuda.gridsize(1)):
        seen = 0
        correct = np.float32(0)
        for p in range(positions):
            if gpu.label_class(labels[p], n, ignore, has_ignore) == c:
                seen += 1
                correct += hits[p]
        accuracy[c] = correct / np.float32(seen) if seen > 0 else np.float32(0)
