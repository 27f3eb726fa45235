"""AnnotatedData: SSD's data layer, images with bounding boxes and their augmentation (SSD's
Caffe fork: layers/annotated_data_layer.cpp and data_transformer.cpp).

The database holds AnnotatedDatums (a Datum, raw or encoded, and groups of normalized boxes
per class). Each image of a batch goes through the fork's steps, its boxes with it:

    distort_param    photometric distortion (pycaffe_cli/data/distort.py)
    expand_param     with probability ``prob``, the image is placed at a random spot of a
                     canvas ``ratio`` times larger (ratio uniform in [1, max_expand_ratio]),
                     the rest filled with the mean_value (0 without one)
    batch_sampler    random crops that meet the samplers' constraints; one is picked
                     uniformly and the image cropped to it (pycaffe_cli/detection/sampling.py)
    resize_param     WARP / FIT_SMALL_SIZE / FIT_LARGE_SIZE_AND_PAD (pycaffe_cli/data/resize.py)
    noise_param      degradations (blur, JPEG, posterize, salt-and-pepper, ...), to every image
                     whatever ``prob`` says, as in the fork (pycaffe_cli/data/noise.py)
    crop_size, or crop_h and crop_w: a random crop in TRAIN, the centre in TEST
    mirror, mean_value / mean_file, scale

A box is carried through each crop or expansion as the fork's TransformAnnotation does
(pycaffe_cli/data/annotation.py): kept when it meets ``emit_constraint`` (if set) and still
overlaps the crop, clipped to it, mirrored with the image.

Tops: data (N, C, H, W) and, when the records carry an annotation type (or
``annotated_data_param.anno_type`` is set), label (1, 1, boxes, 8) with one row per box of the
batch: [item_id, group_label, instance_id, xmin, ymin, xmax, ymax, difficult]; a batch without
boxes gives one row of -1s. Records without a type give the Datums' labels (N,) as Data does.
As in the fork, every image of a batch must come out of the steps with the size of the batch's
first record (set resize_param, or crop_size, when crops differ); FIT_SMALL_SIZE needs
batch_size 1. A ``label_map_file`` is read and checked but, as in the fork, not used.

Where this differs from the fork: encoded images stay decoded through the steps (the fork
re-encodes them as JPEG after each step, losing detail); distortion also applies to raw
Datums (the fork logs "Only support encoded datum now" and skips it); a box's label map is
not needed; raw and encoded images are resized and cropped alike (the fork aborts on a raw
Datum with resize_param or crop_h/crop_w). Like the fork, an expansion of a raw Datum fills
the canvas with 32 (the fork's buffer of spaces) and of an encoded one with the mean values
(0 with a mean_file, which the fork copies in only when it has the canvas's size, aborting
otherwise). For an encoded image a mean_file must have the output's shape and is
subtracted at the output's positions, as the fork does without a crop (with one the fork
reads past the mean image); for a raw Datum it is cropped with the pixels, as in BVLC Caffe.
noise_param also applies to raw 8-bit Datums (the fork applies it to encoded ones only).
"""
from pycaffe_cli.detection.sampling import check_batch_sampler
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.foreign import SSD
from pycaffe_cli.io.prototxt import read_text_proto
from pycaffe_cli.layers.base import register
from pycaffe_cli.layers.annotated_reader import AnnotatedDatumReader, Augmenter
from pycaffe_cli.layers.data import DataLayer
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

_RESIZE = caffe_pb2.ResizeParameter


@register("AnnotatedData", fork=SSD)
class AnnotatedDataLayer(DataLayer):
    """data_param (source, backend, batch_size, rand_skip, prefetch), transform_param with
    SSD's additions, annotated_data_param (batch_sampler, label_map_file, anno_type)."""

    def data_layer_setup(self, top):
        param = self.param.data_param
        batch_size = self.positive_batch_size(param.batch_size, "data_param")
        self.warn_legacy_fields(param, "data_param")
        anno_param = self.param.annotated_data_param
        for batch_sampler in anno_param.batch_sampler:
            problem = check_batch_sampler(batch_sampler)
            if problem:
                raise self.error(problem)
        if anno_param.label_map_file:
            self._check_label_map(anno_param.label_map_file)
        augmenter = Augmenter(self.param.transform_param, self.phase, self.name,
                              list(anno_param.batch_sampler))
        if augmenter.resize is not None and batch_size != 1 and (
                augmenter.resize.resize_mode == _RESIZE.FIT_SMALL_SIZE):
            raise self.error(f"resize_param FIT_SMALL_SIZE needs batch_size 1 (got "
                             f"{batch_size}): its images differ in size")
        db = self._open(param)
        reader = AnnotatedDatumReader(self.name, param.source, db, augmenter, batch_size,
                                      self.seeded_generator(), self.output_labels)
        first = self.start_reader(reader, param)
        shape = (batch_size,) + reader.item_shape(first, "the first record")
        LOG.info("output data size: %s", ",".join(str(d) for d in shape))
        self._label_shape = (batch_size,)
        has_type = first.HasField("type") or anno_param.HasField("anno_type")
        if self.output_labels and has_type:
            if anno_param.HasField("anno_type"):
                LOG.warning('layer "%s": annotated_data_param anno_type replaces the type '
                            "stored in the records", self.name)
            boxes = sum(len(group.annotation) for group in first.annotation_group)
            self._label_shape = (1, 1, max(boxes, 1), 8)
        reader.boxes = self.output_labels and has_type
        return reader, shape

    def _check_label_map(self, path):
        try:
            label_map = read_text_proto(path, caffe_pb2.LabelMap(), what="label map file")
        except CaffeError as error:
            raise self.error(f"annotated_data_param label_map_file: {error}") from None
        labels = [item.label for item in label_map.item]
        if len(set(labels)) != len(labels):
            duplicate = next(label for label in labels if labels.count(label) > 1)
            raise self.error(f"label map file {path!r} gives label {duplicate} to more than "
                             "one item")

    def reshape(self, bottom, top):
        top[0].reshape(self._shapes[0])
        if self.output_labels:
            top[1].reshape(self._label_shape)

    def forward_cpu(self, bottom, top):
        super().forward_cpu(bottom, top)
        if self.output_labels:
            self._label_shape = tuple(top[1].shape)

    def forward_gpu(self, bottom, top):
        super().forward_gpu(bottom, top)
        if self.output_labels:
            self._label_shape = tuple(top[1].shape)
