"""DetectionEvaluate: mark each detection a true or a false positive (SSD's
DetectionEvaluateLayer, src/caffe/layers/detection_evaluate_layer.cpp).

Bottom 0 holds detections, 1 x 1 x N x 7 rows ``[item_id, label, score, xmin, ymin, xmax,
ymax]`` (DetectionOutput's top; rows with item_id -1 are skipped). Bottom 1 holds ground truth,
1 x 1 x M x 8 rows ``[item_id, label, instance_id, xmin, ymin, xmax, ymax, difficult]`` (an
AnnotatedData label; reading stops at the first row with item_id -1). The top is
1 x 1 x (C + N) x 5: first, for every class c but the background, ``[-1, c, num_pos, -1, -1]``
with num_pos the number of its ground-truth boxes in the batch (difficult ones only when
``evaluate_difficult_gt``); then, image by image (item_id ascending) and label by label
(ascending), one row ``[item_id, label, score, tp, fp]`` per detection. Rows left over (the
skipped detections) stay 0. The solver's detection test and ``pycaffe test`` turn these rows
into average precisions (pycaffe_cli/detection/average_precision.py).

Matching, per image and label: the detections, highest score first, each take the
ground-truth box of that label they overlap most (IoU, SSD's JaccardOverlap); at IoU >=
``overlap_threshold`` the first detection to take a box is a true positive, later ones false
positives; below it, false positives. A detection whose best box is difficult while
``evaluate_difficult_gt`` is false is neither (tp = fp = 0, left out of the AP). Detections of
a label or an image without ground truth are false positives, in their input order.

With ``name_size_file`` ("name height width" lines, the test images in order) the boxes are
clipped to [0, 1] and scaled to each image's size before matching (SSD's OutputBBox, with
``resize_param`` describing how the image was resized), and IoU counts pixels inclusively
(+1). As in the fork, the image counter advances once per image that has detections and
wraps at the end of the file.

Fork behaviour kept: the overlap of two pixel boxes that do not meet is 1 / (area_a +
area_b - 1), not 0 (SSD's IntersectBBox gives an empty box of extent 1 x 1). Deviation: the
fork sorts detections with std::sort, whose order among equal scores is unspecified; here
equal scores keep their input order.

There is no CUDA code for this layer in the fork; in GPU mode it reads its bottoms through the
host.
"""
import numpy as np

from pycaffe_cli.detection.boxes import jaccard_overlaps
from pycaffe_cli.detection.pixels import output_boxes, read_name_sizes
from pycaffe_cli.io.foreign import SSD
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.proto import caffe_pb2

_f32 = np.float32
_RESIZE = caffe_pb2.ResizeParameter


@register("DetectionEvaluate", fork=SSD)
class DetectionEvaluateLayer(Layer):
    """True and false positives of detections against ground truth; no backward."""

    exact_num_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.param.detection_evaluate_param
        if not p.HasField("num_classes"):
            raise self.error("Must provide num_classes (detection_evaluate_param)")
        self.num_classes = p.num_classes
        self.background_label_id = p.background_label_id
        self.overlap_threshold = _f32(p.overlap_threshold)
        if not self.overlap_threshold > 0:
            raise self.error(f"overlap_threshold must be > 0, got {p.overlap_threshold:g}")
        self.evaluate_difficult_gt = p.evaluate_difficult_gt
        self.sizes = read_name_sizes(p.name_size_file)[1] if p.HasField("name_size_file") else []
        self.resize_param = p.resize_param if p.HasField("resize_param") else None
        if self.resize_param is not None and self.sizes:
            _check_resize(self, self.resize_param)
        self.count = 0

    def reshape(self, bottom, top):
        for index, (blob, width, what) in enumerate(((bottom[0], 7, "detections"),
                                                     (bottom[1], 8, "ground truth"))):
            if (blob.num_axes > 4 or blob.num != 1 or blob.channels != 1
                    or blob.width != width):
                raise self.error(f"bottom {index} ({what}) must be 1 x 1 x n x {width}, got "
                                 f"{blob.shape_string()}")
        positive_classes = self.num_classes - (self.background_label_id != -1
                                               and self.background_label_id < self.num_classes)
        top[0].reshape((1, 1, positive_classes + bottom[0].height, 5))

    def forward_cpu(self, bottom, top):
        detections = _read_detections(self, bottom[0].cpu_data.reshape(-1, 7))
        ground_truth = _read_ground_truth(self, bottom[1].cpu_data.reshape(-1, 8))
        rows = []
        for c in range(self.num_classes):
            if c != self.background_label_id:
                count = sum(_positives(boxes, self.evaluate_difficult_gt)
                            for labels in ground_truth.values()
                            for label, boxes in labels.items() if label == c)
                rows.append((-1, c, count, -1, -1))
        for item_id in sorted(detections):
            image_gt = ground_truth.get(item_id, {})
            for label in sorted(detections[item_id]):
                rows.extend(self._evaluate(item_id, label, detections[item_id][label],
                                           image_gt.get(label)))
            if self.sizes:
                self.count = (self.count + 1) % len(self.sizes)
        out = top[0].data.reshape(-1, 5)
        out[...] = 0
        if rows:
            out[:len(rows)] = np.asarray(rows, np.float32)

    forward_gpu = forward_cpu   # no device code in the fork: read and write through the host

    def _evaluate(self, item_id, label, detections, gt):
        """The rows of one image's detections of one label (gt: its boxes or None)."""
        if gt is None:
            return [(item_id, label, score, 0, 1) for score in detections[:, 0]]
        order = np.argsort(-detections[:, 0], kind="stable")
        detections = detections[order]
        if self.sizes:
            height, width = self.sizes[self.count]
            det_boxes, det_sizes = output_boxes(detections[:, 1:5], height, width,
                                                self.resize_param)
            gt_boxes, gt_sizes = output_boxes(gt[:, :4], height, width, self.resize_param)
            overlaps = pixel_overlaps(det_boxes, det_sizes, gt_boxes, gt_sizes)
        else:
            overlaps = jaccard_overlaps(detections[:, 1:5], gt[:, :4])
        visited = np.zeros(len(gt), bool)
        rows = []
        for i, score in enumerate(detections[:, 0]):
            best = int(np.argmax(overlaps[i]))   # the first of equal overlaps, as the fork
            tp = fp = 0
            if overlaps[i, best] >= self.overlap_threshold:
                if self.evaluate_difficult_gt or not gt[best, 4]:
                    tp, fp = (0, 1) if visited[best] else (1, 0)
                    visited[best] = True
            else:
                fp = 1
            rows.append((item_id, label, score, tp, fp))
        return rows

    def backward_cpu(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("DetectionEvaluate layer cannot backpropagate")

    backward_gpu = backward_cpu

    def get_state(self):
        """The image counter into name_size_file, so a resumed run continues with it."""
        return {"count": self.count} if self.sizes else None

    def set_state(self, state):
        if state:
            self.count = int(state["count"]) % len(self.sizes)


def _read_detections(layer, data):
    """{item_id: {label: float32 rows [score, xmin, ymin, xmax, ymax]}} (GetDetectionResults)."""
    found = {}
    for row in data:
        item_id = int(row[0])
        if item_id == -1:
            continue
        label = int(row[1])
        if label == layer.background_label_id:
            raise layer.error(f"Found background label ({label}) in the detection results")
        found.setdefault(item_id, {}).setdefault(label, []).append(row[2:7])
    return {item: {label: np.asarray(rows, np.float32) for label, rows in labels.items()}
            for item, labels in found.items()}


def _read_ground_truth(layer, data):
    """{item_id: {label: float32 rows [xmin, ymin, xmax, ymax, difficult]}} (GetGroundTruth,
    difficult boxes included); reading stops at the first item_id -1."""
    found = {}
    for row in data:
        item_id = int(row[0])
        if item_id == -1:
            break
        label = int(row[1])
        if label == layer.background_label_id:
            raise layer.error(f"Found background label ({label}) in the ground truth")
        difficult = _f32(1) if row[7] else _f32(0)
        found.setdefault(item_id, {}).setdefault(label, []).append(
            np.append(row[3:7], difficult))
    return {item: {label: np.asarray(rows, np.float32) for label, rows in labels.items()}
            for item, labels in found.items()}


def _positives(boxes, evaluate_difficult_gt):
    return len(boxes) if evaluate_difficult_gt else int(np.sum(boxes[:, 4] == 0))


def _check_resize(layer, resize):
    if resize.resize_mode not in (_RESIZE.WARP, _RESIZE.FIT_SMALL_SIZE,
                                  _RESIZE.FIT_LARGE_SIZE_AND_PAD):
        raise layer.error(f"Unknown resize mode {resize.resize_mode}")
    if resize.height <= 0 or resize.width <= 0:
        raise layer.error("resize_param needs height and width > 0 to map boxes back to the "
                          "original image sizes")


def pixel_overlaps(boxes_a, sizes_a, boxes_b, sizes_b):
    """SSD's JaccardOverlap(normalized=false) of boxes carrying their stored areas: the
    intersection counts pixels inclusively (+1 per side), the union uses the stored areas."""
    a = boxes_a.reshape(-1, 1, 4)
    b = boxes_b.reshape(1, -1, 4)
    apart = ((b[..., 0] > a[..., 2]) | (b[..., 2] < a[..., 0])
             | (b[..., 1] > a[..., 3]) | (b[..., 3] < a[..., 1]))
    zero, one = _f32(0), _f32(1)
    width = np.where(apart, zero,
                     np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0])) + one
    height = np.where(apart, zero,
                      np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1])) + one
    meet = (width > 0) & (height > 0)
    intersection = (width * height).astype(np.float32)
    union = sizes_a.reshape(-1, 1) + sizes_b.reshape(1, -1) - intersection
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(meet, intersection / union, zero).astype(np.float32)
