"""DetectionOutput: SSD's final detections (src/caffe/layers/detection_output_layer.cpp).

Bottoms, for N images and P priors:

- loc (N, P * L * 4): box offsets per prior, L = 1 with share_location, else num_classes;
- conf (N, P * num_classes): class scores per prior, already normalized (deploy nets put a
  Softmax, then a Flatten, in front of this layer; the layer applies none);
- prior (1, 2, P * 4): PriorBox's top, the prior boxes then their variances.

For each image the offsets are decoded against the priors (``detection.coding``,
``code_type``, ``variance_encoded_in_target``; no clipping, unless OpenCV's ``clip``), and
for each class but ``background_label_id`` the boxes scoring above ``confidence_threshold``
go through NMS (``detection.nms``: ``nms_param`` nms_threshold, top_k, eta). With
``keep_top_k`` > -1 an image keeps only its best ``keep_top_k`` detections over all classes.

The top is (1, 1, D, 7): one row [image_id, label, score, xmin, ymin, xmax, ymax] per kept
detection, images in order, within an image labels ascending, within a label scores
descending. When no image keeps anything the top is (1, 1, N, 7) of -1 with each row's
image_id set (the fork's placeholder rows); otherwise an image with no detection has no row.

``save_output_param`` with an ``output_directory``, a ``label_map_file`` and a
``name_size_file`` (lines ``name height width``, one per test image in the order the net sees
them) writes the detections of every ``num_test_image`` images (default: all the file lists)
as result files, boxes in the image's pixels (clipped, scaled, and with ``resize_param``
mapped back as the fork's OutputBBox does), rounded to 2 decimals, then truncated to
integers:

- "VOC": one file per class, ``<prefix><class name>.txt``, lines
  ``image score xmin ymin xmax ymax``;
- "ILSVRC": ``<prefix>.txt``, lines ``image label score xmin ymin xmax ymax``;
- "COCO": ``<prefix>.json``, ``{"detections": [{"image_id", "category_id", "bbox": [x, y,
  width, height], "score"}]}`` (boxes with 2 decimals, not truncated).

Differences from the fork: it sorts for keep_top_k with std::sort, whose order among equal
scores is unspecified; here equal scores keep label order, then NMS order. The fork's GPU
path sorts before NMS with std::sort too; both modes here use the CPU path's stable sort, so
CPU and GPU mode agree. With share_location and background_label_id -1 the fork's CPU pass
aborts ("Could not find location predictions for label -1"); its GPU pass and this layer
decode the shared boxes for every class. The fork deletes an existing output_directory with
everything in it at setup; here it is created when missing and only the result files are
overwritten. The fork's COCO output is an empty file (it builds the JSON and never writes
it); here the JSON is written, with numbers as numbers. Drawing the detections
(``visualize``) is not implemented and refused; a fourth bottom (the images it draws on) is
accepted and unused.

GPU mode reads the bottoms on the host and runs the same code, as the fork runs NMS on the
host too; the top is written on the host and reaches the device when a consumer reads it.
There is no backward pass.
"""

import numpy as np

from pycaffe_cli.detection.coding import decode_boxes
from pycaffe_cli.detection.nms import nms_indices
from pycaffe_cli.detection.result_files import ResultWriter
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.foreign import SSD
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.inference_hooks import InferenceHooks
from pycaffe_cli.log import LOG

_FLT_MAX = float(np.finfo(np.float32).max)


class DetectionOutputInferenceHooks(InferenceHooks):
    reshape_reads_values = True  # the number of detections sets the top's third axis


@register("DetectionOutput", fork=SSD)
class DetectionOutputLayer(Layer):
    """detection_output_param: num_classes (required), share_location (true),
    background_label_id (0), nms_param { nms_threshold (0.3) top_k eta (1) }, code_type
    (CORNER), variance_encoded_in_target (false), keep_top_k (-1), confidence_threshold
    (unset: every box), clip (false, OpenCV's addition)."""

    min_num_bottom = 3
    max_num_bottom = 4  # the fork's visualize draws on a fourth bottom, the images
    exact_num_top = 1
    inference_hooks = DetectionOutputInferenceHooks

    def layer_setup(self, bottom, top):
        p = self.param.detection_output_param
        if not p.HasField("num_classes"):
            raise self.error("DetectionOutput needs detection_output_param { num_classes }")
        self.num_classes = p.num_classes
        self.share_location = p.share_location
        self.num_loc_classes = 1 if self.share_location else self.num_classes
        self.background_label_id = p.background_label_id
        self.code_type = p.code_type
        self.variance_encoded_in_target = p.variance_encoded_in_target
        self.keep_top_k = p.keep_top_k
        self.clip = p.clip
        self.confidence_threshold = (p.confidence_threshold
                                     if p.HasField("confidence_threshold") else -_FLT_MAX)
        nms = p.nms_param
        self.nms_threshold = nms.nms_threshold
        if not self.nms_threshold >= 0:
            raise self.error(f"nms_threshold must be non negative, got {self.nms_threshold}")
        self.eta = nms.eta
        if not 0 < self.eta <= 1:
            raise self.error(f"nms_param eta must be in (0, 1], got {self.eta}")
        self.top_k = nms.top_k if nms.HasField("top_k") else -1
        if p.visualize:
            raise self.error("visualize (drawing detections with OpenCV) is not implemented "
                             "in pycaffe; remove visualize: true")
        self.writer = None
        if p.HasField("save_output_param"):
            try:
                self.writer = ResultWriter.from_param(p.save_output_param, self.num_classes,
                                                      self.background_label_id)
            except CaffeError as error:
                raise self.error(f"save_output_param: {error}") from None

    def reshape(self, bottom, top):
        loc, conf, prior = bottom[:3]
        if loc.num != conf.num:
            raise self.error(f"loc and conf must have the same number of images, got "
                             f"{loc.shape_string()} and {conf.shape_string()}")
        self.num_priors = prior.height // 4
        if self.num_priors * self.num_loc_classes * 4 != loc.count(1):
            raise self.error(f"Number of priors must match number of location predictions: "
                             f"{self.num_priors} priors ({prior.shape_string()}) and "
                             f"{self.num_loc_classes} location class(es) need "
                             f"{self.num_priors * self.num_loc_classes * 4} values per image, "
                             f"loc has {loc.count(1)}")
        if self.num_priors * self.num_classes != conf.count(1):
            raise self.error(f"Number of priors must match number of confidence predictions: "
                             f"{self.num_priors} priors and {self.num_classes} classes need "
                             f"{self.num_priors * self.num_classes} values per image, conf "
                             f"has {conf.count(1)}")
        if prior.count(1) < 2 * self.num_priors * 4:
            raise self.error(f"the prior blob must hold the priors then their variances "
                             f"(1, 2, {self.num_priors * 4}), got {prior.shape_string()}")
        # The number of detections is known only after NMS: one row until then.
        top[0].reshape((1, 1, 1, 7))
        if self.writer is not None:
            try:
                self.writer.start()
            except CaffeError as error:
                raise self.error(f"save_output_param: {error}") from None

    def _decode(self, loc, prior):
        """Decoded boxes (N, L, P, 4); without share_location the background's are left 0.

        The fork's CPU pass skips the shared boxes too when background_label_id is -1 (the
        label it files them under) and then aborts for want of them; its GPU pass, followed
        here, decodes them."""
        num, num_priors = loc.shape[0], self.num_priors
        priors = prior[:num_priors * 4].reshape(num_priors, 4)
        variances = prior[num_priors * 4:2 * num_priors * 4].reshape(num_priors, 4)
        loc = loc.reshape(num, num_priors, self.num_loc_classes, 4)
        boxes = np.zeros((num, self.num_loc_classes, num_priors, 4), np.float32)
        tiled_priors = np.tile(priors, (num, 1))
        tiled_variances = np.tile(variances, (num, 1))
        for c in range(self.num_loc_classes):
            if not self.share_location and c == self.background_label_id:
                continue
            boxes[:, c] = decode_boxes(
                tiled_priors, tiled_variances, self.code_type,
                self.variance_encoded_in_target, self.clip,
                loc[:, :, c, :].reshape(-1, 4)).reshape(num, num_priors, 4)
        return boxes

    def detections(self, loc, conf, prior):
        """The (D, 7) rows of the top, or None when no image keeps a detection."""
        num = loc.shape[0]
        boxes = self._decode(loc, prior)
        scores = conf.reshape(num, self.num_priors, self.num_classes)
        rows = []
        for i in range(num):
            labels, indices = [], []
            for c in range(self.num_classes):
                if c == self.background_label_id:
                    continue
                class_boxes = boxes[i, 0 if self.share_location else c]
                kept = nms_indices(class_boxes, scores[i, :, c], self.confidence_threshold,
                                   self.nms_threshold, self.eta, self.top_k)
                labels.append(np.full(len(kept), c, np.int64))
                indices.append(kept)
            if not labels:
                continue
            labels = np.concatenate(labels)
            indices = np.concatenate(indices)
            kept_scores = scores[i, indices, labels]
            if -1 < self.keep_top_k < len(indices):
                best = np.argsort(-kept_scores, kind="stable")[:self.keep_top_k]
                # Back to label order (ascending), best first within a label.
                best = best[np.argsort(labels[best], kind="stable")]
                labels, indices, kept_scores = labels[best], indices[best], kept_scores[best]
            if len(indices) == 0:
                continue
            image_rows = np.empty((len(indices), 7), np.float32)
            image_rows[:, 0] = i
            image_rows[:, 1] = labels
            image_rows[:, 2] = kept_scores
            image_rows[:, 3:] = boxes[i, 0 if self.share_location else labels, indices]
            rows.append(image_rows)
        return np.concatenate(rows) if rows else None

    def forward_cpu(self, bottom, top):
        loc, conf, prior = (blob.cpu_data for blob in bottom[:3])
        num = loc.shape[0]
        rows = self.detections(loc.reshape(num, -1), conf, prior.reshape(-1))
        if rows is None:
            LOG.info("Couldn't find any detections")
            top[0].reshape((1, 1, num, 7))
            out = top[0].data
            out[...] = -1
            out[0, 0, :, 0] = np.arange(num)
        else:
            top[0].reshape((1, 1, len(rows), 7))
            top[0].data[...] = rows.reshape(1, 1, -1, 7)
        if self.writer is not None:
            try:
                self.writer.add_batch(num, np.zeros((0, 7)) if rows is None else rows)
            except CaffeError as error:
                raise self.error(f"save_output_param: {error}") from None

    # The fork's GPU pass decodes on the device but runs NMS on the host; here all of it runs
    # on the host, and the top (written there) reaches the device when a consumer reads it.
    forward_gpu = forward_cpu

    def allow_force_backward(self, bottom_index):
        return False
