"""The schema additions of SSD (weiliu89/caffe, branch ssd), Fast/Faster R-CNN
(rbgirshick/caffe-fast-rcnn) and R-FCN (daijifeng001/caffe-rfcn) in proto/caffe.proto: their
prototxts parse, round-trip through text and binary, and carry the forks' field numbers, so
that the forks' binary files read here; where a fork numbers a field as BVLC master numbers
another, BVLC's keeps the number (docs/cli.md, "Files"). What pycaffe does not implement of
them is refused in one line naming the fork: tests/io/test_foreign.py and the end of this file.
"""
import struct

import numpy as np
import pytest
from google.protobuf import text_format, unknown_fields

from caffe.net_spec import layers as L, params as P
from pycaffe_cli.io.prototxt import read_net_param, read_solver_param
from pycaffe_cli.io.weights import read_weights
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.proto import caffe_pb2
from tests.cli.conftest import run_cli  # noqa: F401 (fixture)

# An SSD300 deploy net's head on conv4_3, as SSD's ssd_pascal.py writes it.
SSD_DEPLOY = """
name: "VGG_VOC0712_SSD_300x300_deploy"
input: "data"
input_shape { dim: 1 dim: 3 dim: 300 dim: 300 }
layer { name: "conv4_3_norm" type: "Normalize" bottom: "conv4_3" top: "conv4_3_norm"
  norm_param { across_spatial: false scale_filler { type: "constant" value: 20 }
               channel_shared: false } }
layer { name: "conv4_3_norm_mbox_loc_perm" type: "Permute" bottom: "conv4_3_norm_mbox_loc"
  top: "conv4_3_norm_mbox_loc_perm" permute_param { order: 0 order: 2 order: 3 order: 1 } }
layer { name: "conv4_3_norm_mbox_priorbox" type: "PriorBox" bottom: "conv4_3_norm"
  bottom: "data" top: "conv4_3_norm_mbox_priorbox"
  prior_box_param { min_size: 30.0 max_size: 60.0 aspect_ratio: 2 flip: true clip: false
    variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2 step: 8 offset: 0.5 } }
layer { name: "detection_out" type: "DetectionOutput" bottom: "mbox_loc"
  bottom: "mbox_conf_flatten" bottom: "mbox_priorbox" top: "detection_out"
  include { phase: TEST }
  detection_output_param { num_classes: 21 share_location: true background_label_id: 0
    nms_param { nms_threshold: 0.45 top_k: 400 }
    save_output_param { label_map_file: "data/VOC0712/labelmap_voc.prototxt" }
    code_type: CENTER_SIZE keep_top_k: 200 confidence_threshold: 0.01 } }
"""
# SSD's training data layer and loss, and its test-time evaluation.
SSD_TRAIN = """
name: "VGG_VOC0712_SSD_300x300_train"
layer { name: "data" type: "AnnotatedData" top: "data" top: "label" include { phase: TRAIN }
  transform_param { mirror: true mean_value: 104 mean_value: 117 mean_value: 123
    resize_param { prob: 1 resize_mode: WARP height: 300 width: 300
      interp_mode: LINEAR interp_mode: AREA interp_mode: NEAREST interp_mode: CUBIC
      interp_mode: LANCZOS4 }
    emit_constraint { emit_type: CENTER }
    distort_param { brightness_prob: 0.5 brightness_delta: 32 contrast_prob: 0.5
      contrast_lower: 0.5 contrast_upper: 1.5 hue_prob: 0.5 hue_delta: 18
      saturation_prob: 0.5 saturation_lower: 0.5 saturation_upper: 1.5
      random_order_prob: 0.0 }
    expand_param { prob: 0.5 max_expand_ratio: 4.0 } }
  data_param { source: "examples/VOC0712/VOC0712_trainval_lmdb" batch_size: 32
    backend: LMDB }
  annotated_data_param {
    batch_sampler { max_sample: 1 max_trials: 1 }
    batch_sampler { sampler { min_scale: 0.3 max_scale: 1.0 min_aspect_ratio: 0.5
                              max_aspect_ratio: 2.0 }
                    sample_constraint { min_jaccard_overlap: 0.1 } max_sample: 1
                    max_trials: 50 }
    label_map_file: "data/VOC0712/labelmap_voc.prototxt" } }
layer { name: "mbox_loss" type: "MultiBoxLoss" bottom: "mbox_loc" bottom: "mbox_conf"
  bottom: "mbox_priorbox" bottom: "label" top: "mbox_loss" include { phase: TRAIN }
  propagate_down: true propagate_down: true propagate_down: false propagate_down: false
  loss_param { normalization: VALID }
  multibox_loss_param { loc_loss_type: SMOOTH_L1 conf_loss_type: SOFTMAX loc_weight: 1.0
    num_classes: 21 share_location: true match_type: PER_PREDICTION overlap_threshold: 0.5
    use_prior_for_matching: true background_label_id: 0 use_difficult_gt: true
    neg_pos_ratio: 3.0 neg_overlap: 0.5 code_type: CENTER_SIZE
    ignore_cross_boundary_bbox: false mining_type: MAX_NEGATIVE } }
layer { name: "detection_eval" type: "DetectionEvaluate" bottom: "detection_out"
  bottom: "label" top: "detection_eval" include { phase: TEST }
  detection_evaluate_param { num_classes: 21 background_label_id: 0 overlap_threshold: 0.5
    evaluate_difficult_gt: false name_size_file: "data/VOC0712/test_name_size.txt" } }
"""
SSD_SOLVER = """
train_net: "models/VGGNet/VOC0712/SSD_300x300/train.prototxt"
test_net: "models/VGGNet/VOC0712/SSD_300x300/test.prototxt"
test_iter: 619
test_interval: 10000
base_lr: 0.001
lr_policy: "multistep"
stepvalue: 80000
gamma: 0.1
momentum: 0.9
max_iter: 120000
snapshot_prefix: "models/VGGNet/VOC0712/SSD_300x300/VGG_VOC0712_SSD_300x300"
solver_mode: GPU
iter_size: 1
type: "SGD"
eval_type: "detection"
ap_version: "11point"
show_per_class_result: true
"""
# Fast/Faster R-CNN's VGG16 head, and R-FCN's position-sensitive pooling and OHEM.
FASTER_RCNN = """
name: "VGG16"
layer { name: "roi_pool5" type: "ROIPooling" bottom: "conv5_3" bottom: "rois" top: "pool5"
  roi_pooling_param { pooled_w: 7 pooled_h: 7 spatial_scale: 0.0625 } }
layer { name: "drop6" type: "Dropout" bottom: "fc6" top: "fc6"
  dropout_param { dropout_ratio: 0.5 scale_train: false } }
layer { name: "loss_bbox" type: "SmoothL1Loss" bottom: "bbox_pred" bottom: "bbox_targets"
  bottom: "bbox_inside_weights" bottom: "bbox_outside_weights" top: "loss_bbox"
  loss_weight: 1 smooth_l1_loss_param { sigma: 3.0 } }
"""
RFCN = """
name: "ResNet-101"
layer { name: "psroipooled_cls_rois" type: "PSROIPooling" bottom: "rfcn_cls" bottom: "rois"
  top: "psroipooled_cls_rois"
  psroi_pooling_param { spatial_scale: 0.0625 output_dim: 21 group_size: 7 } }
layer { name: "annotator_detector" type: "BoxAnnotatorOHEM" bottom: "rois"
  bottom: "per_roi_loss" bottom: "labels" bottom: "bbox_inside_weights"
  top: "labels_ohem" top: "bbox_loss_weights_ohem"
  box_annotator_ohem_param { roi_per_img: 128 ignore_label: -1 } }
layer { name: "loss_bbox" type: "SmoothL1LossOHEM" bottom: "bbox_pred_ohem"
  bottom: "bbox_targets" bottom: "bbox_loss_weights_ohem" top: "loss_bbox" loss_weight: 1
  loss_param { normalization: PRE_FIXED pre_fixed_normalizer: 128 } }
"""
NETS = {"ssd_deploy": SSD_DEPLOY, "ssd_train": SSD_TRAIN, "faster_rcnn": FASTER_RCNN,
        "rfcn": RFCN}

# (message, field, number) as the forks' caffe.proto number them.
FORK_NUMBERS = [
    ("LayerParameter", "annotated_data_param", 200), ("LayerParameter", "multibox_loss_param", 201),
    ("LayerParameter", "permute_param", 202), ("LayerParameter", "prior_box_param", 203),
    ("LayerParameter", "detection_output_param", 204),
    ("LayerParameter", "detection_evaluate_param", 205), ("LayerParameter", "norm_param", 206),
    ("LayerParameter", "video_data_param", 207),
    ("LayerParameter", "roi_pooling_param", 8266711),
    ("LayerParameter", "smooth_l1_loss_param", 8266712),
    ("LayerParameter", "box_annotator_ohem_param", 10000),
    ("LayerParameter", "psroi_pooling_param", 10001),
    ("TransformationParameter", "resize_param", 8), ("TransformationParameter", "noise_param", 9),
    ("TransformationParameter", "emit_constraint", 10), ("TransformationParameter", "crop_h", 11),
    ("TransformationParameter", "crop_w", 12), ("TransformationParameter", "distort_param", 13),
    ("TransformationParameter", "expand_param", 14),
    ("SolverParameter", "plateau_winsize", 43), ("SolverParameter", "show_per_class_result", 44),
    ("SolverState", "minimum_loss", 5), ("SolverState", "iter_last_event", 6),
    ("LossParameter", "pre_fixed_normalizer", 4), ("DropoutParameter", "scale_train", 2),
    ("MultiBoxLossParameter", "code_type", 14), ("MultiBoxLossParameter", "mining_type", 20),
    ("MultiBoxLossParameter", "use_prior_for_nms", 23),
    ("DetectionOutputParameter", "variance_encoded_in_target", 8),
    ("DetectionOutputParameter", "keep_top_k", 7), ("PriorBoxParameter", "offset", 13),
    ("ResizeParameter", "height_scale", 8), ("ResizeParameter", "interp_mode", 7),
    ("NoiseParameter", "saltpepper_param", 10), ("AnnotatedDatum", "annotation_group", 3),
    ("PSROIPoolingParameter", "group_size", 3), ("ROIPoolingParameter", "spatial_scale", 3),
]


def varint(value):
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field_bytes(number, payload, wire_type=2):
    """One field as protobuf writes it: the tag (number << 3 | wire type), then the value."""
    if wire_type == 2:
        payload = varint(len(payload)) + payload
    return varint(number << 3 | wire_type) + payload


def parse(text, message):
    return text_format.Parse(text, message)


@pytest.mark.parametrize("name", sorted(NETS))
def test_the_forks_nets_parse_and_round_trip(write, name):
    param = read_net_param(write(f"{name}.prototxt", NETS[name]))
    assert param.layer
    again = parse(text_format.MessageToString(param), caffe_pb2.NetParameter())
    assert again == param
    binary = caffe_pb2.NetParameter.FromString(param.SerializeToString())
    assert binary == param
    assert not unknown_fields.UnknownFieldSet(binary)


def test_the_ssd_solver_parses_and_round_trips(write):
    param = read_solver_param(write("solver.prototxt", SSD_SOLVER))
    assert (param.eval_type, param.ap_version, param.show_per_class_result) == (
        "detection", "11point", True)
    assert param.layer_wise_reduce and not param.weights   # BVLC's 41 and 42 untouched
    assert parse(text_format.MessageToString(param), caffe_pb2.SolverParameter()) == param
    assert caffe_pb2.SolverParameter.FromString(param.SerializeToString()) == param


def test_the_fields_carry_the_forks_numbers():
    for message, field, number in FORK_NUMBERS:
        descriptor = getattr(caffe_pb2, message).DESCRIPTOR
        assert descriptor.fields_by_name[field].number == number, (message, field)
    # and the bytes say so: a tag is the number shifted left by 3, or'ed with the wire type
    layer = caffe_pb2.LayerParameter()
    layer.norm_param.across_spatial = False
    assert layer.SerializeToString() == field_bytes(206, field_bytes(1, b"\x00", 0))
    layer = caffe_pb2.LayerParameter()
    layer.roi_pooling_param.pooled_h = 7
    assert layer.SerializeToString() == field_bytes(8266711, field_bytes(1, b"\x07", 0))
    layer = caffe_pb2.LayerParameter()
    layer.psroi_pooling_param.group_size = 7
    assert layer.SerializePartialToString() == field_bytes(10001, field_bytes(3, b"\x07", 0))
    transform = caffe_pb2.TransformationParameter()
    transform.expand_param.max_expand_ratio = 4
    assert transform.SerializeToString() == field_bytes(
        14, field_bytes(2, struct.pack("<f", 4.0), 5))


def test_bytes_written_by_the_forks_read_here():
    # SSD's train data as its LMDBs store it: an AnnotatedDatum with one box
    box = field_bytes(1, struct.pack("<f", 0.25), 5) + field_bytes(4, struct.pack("<f", 0.5), 5)
    annotation = field_bytes(1, b"\x00", 0) + field_bytes(2, box)
    group = field_bytes(1, b"\x0c", 0) + field_bytes(2, annotation)
    datum = field_bytes(1, field_bytes(1, b"\x03", 0)) + field_bytes(2, b"\x00", 0)
    read = caffe_pb2.AnnotatedDatum.FromString(datum + field_bytes(3, group))
    assert read.type == caffe_pb2.AnnotatedDatum.BBOX and read.datum.channels == 3
    group = read.annotation_group[0]
    assert group.group_label == 12
    assert (group.annotation[0].bbox.xmin, group.annotation[0].bbox.ymax) == (0.25, 0.5)
    # a Faster R-CNN layer as caffe-fast-rcnn writes it into a .caffemodel
    sigma = field_bytes(1, struct.pack("<f", 3.0), 5)
    layer = caffe_pb2.LayerParameter.FromString(
        field_bytes(2, b"SmoothL1Loss") + field_bytes(8266712, sigma))
    assert layer.smooth_l1_loss_param.sigma == 3.0


def test_the_forks_defaults():
    prior = caffe_pb2.PriorBoxParameter()
    assert (prior.flip, prior.clip, prior.offset) == (True, False, np.float32(0.5))
    output = caffe_pb2.DetectionOutputParameter()
    assert (output.share_location, output.keep_top_k, output.code_type) == (
        True, -1, caffe_pb2.PriorBoxParameter.CORNER)
    assert output.nms_param.nms_threshold == np.float32(0.3) and output.nms_param.eta == 1
    loss = caffe_pb2.MultiBoxLossParameter()
    assert (loss.loc_loss_type, loss.conf_loss_type, loss.match_type, loss.mining_type) == (
        loss.SMOOTH_L1, loss.SOFTMAX, loss.PER_PREDICTION, loss.MAX_NEGATIVE)
    assert (loss.neg_pos_ratio, loss.sample_size, loss.background_label_id) == (3, 64, 0)
    norm = caffe_pb2.NormalizeParameter()
    assert (norm.across_spatial, norm.channel_shared, norm.eps) == (
        True, True, np.float32(1e-10))
    assert caffe_pb2.BatchSampler().max_trials == 100
    assert caffe_pb2.Sampler().max_aspect_ratio == 1
    assert caffe_pb2.ResizeParameter().resize_mode == caffe_pb2.ResizeParameter.WARP
    assert caffe_pb2.NoiseParameter().jpeg == -1
    assert caffe_pb2.ExpansionParameter().prob == 1
    assert caffe_pb2.SolverParameter().eval_type == "classification"
    assert caffe_pb2.SolverParameter().ap_version == "Integral"
    assert caffe_pb2.SolverState().minimum_loss == np.float32(1e38)
    assert caffe_pb2.ROIPoolingParameter().spatial_scale == 1
    assert caffe_pb2.SmoothL1LossParameter().sigma == 1
    assert caffe_pb2.BoxAnnotatorOHEMParameter().ignore_label == -1
    assert caffe_pb2.LossParameter().pre_fixed_normalizer == 1
    assert caffe_pb2.DropoutParameter().scale_train
    # R-FCN marks these required, as pycaffe does: a layer cannot run without them
    assert not caffe_pb2.PSROIPoolingParameter(spatial_scale=0.0625).IsInitialized()


def test_net_spec_writes_the_forks_layers():
    """SSD's scripts build their nets with net_spec (model_libs.py)."""
    data = L.Input(shape=dict(dim=[1, 3, 300, 300]))
    prior = L.PriorBox(data, data, min_size=30.0, aspect_ratio=[2], flip=True,
                       variance=[0.1, 0.1, 0.2, 0.2])
    layer = prior.to_proto().layer[-1]
    assert list(layer.prior_box_param.variance) == pytest.approx([0.1, 0.1, 0.2, 0.2])
    assert P.PriorBox.CENTER_SIZE == 2 and P.MultiBoxLoss.MAX_NEGATIVE == 1
    assert P.Resize.LANCZOS4 == 5 and P.Loss.VALID == 1
    norm = L.Normalize(data, across_spatial=False, scale_filler=dict(type="constant", value=20))
    assert not norm.to_proto().layer[-1].norm_param.across_spatial


def test_dropout_reads_scale_train():
    """Fast R-CNN's and R-FCN's DropoutParameter.scale_train, which the layer implements."""
    param = parse('name: "drop" type: "Dropout" bottom: "x" top: "x" '
                  "dropout_param { dropout_ratio: 0.25 scale_train: false }",
                  caffe_pb2.LayerParameter())
    layer = create_layer(param)
    layer.layer_setup(None, None)
    assert layer.scale_train is False


# --- collisions: BVLC master's numbers win ----------------------------------------------------
def test_bvlc_keeps_its_solver_numbers_where_ssd_reuses_them():
    """SSD numbers eval_type and ap_version 41 and 42, BVLC master's layer_wise_reduce and
    weights: BVLC's keep them, SSD's move to 1041 and 1042. Text files are unaffected."""
    fields = caffe_pb2.SolverParameter.DESCRIPTOR.fields_by_name
    assert (fields["layer_wise_reduce"].number, fields["weights"].number) == (41, 42)
    assert (fields["eval_type"].number, fields["ap_version"].number) == (1041, 1042)
    param = parse('eval_type: "detection" weights: "a.caffemodel" layer_wise_reduce: false',
                  caffe_pb2.SolverParameter())
    assert param.SerializeToString() == (field_bytes(41, b"\x00", 0)
                                         + field_bytes(42, b"a.caffemodel")
                                         + field_bytes(1041, b"detection"))
    # eval_type as SSD's Caffe writes it in binary: a string at 41, where BVLC has a bool;
    # the wire types differ, so it stays an unknown field instead of setting layer_wise_reduce
    read = caffe_pb2.SolverParameter.FromString(field_bytes(41, b"detection"))
    assert not read.HasField("layer_wise_reduce") and read.eval_type == "classification"
    assert [(f.field_number, f.wire_type) for f in unknown_fields.UnknownFieldSet(read)] == [
        (41, 2)]


def test_bvlc_keeps_none_where_rfcn_numbers_pre_fixed():
    """R-FCN's NormalizationMode has PRE_FIXED = 3 and NONE = 4; BVLC's NONE keeps 3."""
    modes = caffe_pb2.LossParameter
    assert (modes.FULL, modes.VALID, modes.BATCH_SIZE, modes.NONE) == (0, 1, 2, 3)
    assert modes.PRE_FIXED == 4
    param = parse("normalization: PRE_FIXED pre_fixed_normalizer: 128", caffe_pb2.LossParameter())
    assert param.normalization == modes.PRE_FIXED and param.pre_fixed_normalizer == 128


def test_bvlc_keeps_147_and_148_where_py_rfcn_numbers_its_layers(write):
    """py-R-FCN's Microsoft/caffe numbers roi_pooling_param, smooth_l1_loss_param,
    psroi_pooling_param and box_annotator_ohem_param 147 to 150; 147 and 148 are BVLC
    master's swish_param and clip_param, so pycaffe uses caffe-fast-rcnn's and caffe-rfcn's
    numbers. A caffemodel of that fork still gives its weights: they go by layer name."""
    fields = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
    assert (fields["swish_param"].number, fields["clip_param"].number) == (147, 148)
    weights = np.arange(6, dtype=np.float32)
    blob = field_bytes(7, field_bytes(1, varint(2) + varint(3))) + field_bytes(
        5, weights.tobytes())
    layers = [field_bytes(1, b"cls_score") + field_bytes(2, b"InnerProduct")
              + field_bytes(7, blob),
              field_bytes(1, b"loss_bbox") + field_bytes(2, b"SmoothL1Loss")
              + field_bytes(148, field_bytes(1, struct.pack("<f", 3.0), 5)),
              field_bytes(1, b"psroi") + field_bytes(2, b"PSROIPooling")
              + field_bytes(149, field_bytes(3, b"\x07", 0))]
    net = b"".join(field_bytes(100, layer) for layer in layers)
    path = write("py_rfcn.caffemodel", "")
    with open(path, "wb") as stream:
        stream.write(net)
    read = dict(read_weights(path))
    np.testing.assert_array_equal(read["cls_score"][0], weights.reshape(2, 3))
    assert read["loss_bbox"] == [] and read["psroi"] == []
    param = caffe_pb2.NetParameter.FromString(net)
    assert not param.layer[2].HasField("psroi_pooling_param")   # 149: an unknown field


# --- what pycaffe does not implement yet: one line naming the fork -----------------------------
TINY_NET = """name: "tiny"
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 }
    data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


@pytest.mark.parametrize("extra, where, words", [
    # SSD's solver options run (tests/solvers/test_detection_eval.py checks what they do)
    ('eval_type: "detection"\nap_version: "11point"\n', None, []),
    ('lr_policy: "plateau"\nplateau_winsize: 1000\n', None, []),
    ('eval_type: "classification"\nshow_per_class_result: true\n', None, []),
    # values the fork does not know: one line naming the field
    ('eval_type: "segmentation"\n', ":5: ",
     ['eval_type: "segmentation"', "Unknown evaluation type"]),
    ('eval_type: "detection"\nap_version: "VOC"\n', ":6: ",
     ['ap_version: "VOC"', "Unknown ap_version", '"11point"']),
])
def test_the_solver_runs_ssds_options_and_refuses_unknown_values(run_cli, write,  # noqa: F811
                                                                 extra, where, words):
    net = write("net.prototxt", TINY_NET)
    policy = "" if "lr_policy" in extra else 'lr_policy: "fixed"\n'
    solver = write("solver.prototxt", f'net: "{net}"\nbase_lr: 0.01\nmax_iter: 1\n'
                   f'snapshot_after_train: false\n{extra}{policy}')
    result = run_cli("train", "--solver", solver)
    if where is None:
        assert result.code == 0, result.err
        return
    assert result.code == 1 and len(result.error_lines()) == 1
    line = result.error_lines()[0]
    assert line.startswith(f"pycaffe: error: {solver}{where}")
    for word in words:
        assert word in line


def test_rfcn_pre_fixed_normalization_trains(run_cli, write):  # noqa: F811
    """loss_param { normalization: PRE_FIXED } (R-FCN) runs: the loss is divided by
    pre_fixed_normalizer (the layers' own tests check the numbers)."""
    net = write("net.prototxt", TINY_NET.replace(
        'top: "loss" }', 'top: "loss"\n  loss_param { normalization: PRE_FIXED '
        'pre_fixed_normalizer: 128 } }'))
    solver = write("solver.prototxt", f'net: "{net}"\nbase_lr: 0.01\nmax_iter: 1\n'
                   'lr_policy: "fixed"\nsnapshot_after_train: false\n')
    result = run_cli("train", "--solver", solver)
    assert result.code == 0, result.err
