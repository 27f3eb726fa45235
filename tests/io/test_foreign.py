"""Errors about other Caffe forks' fields, enum values and layer types name the BVLC
equivalent (or say there is none), in one line with the file, line and column."""
import pytest

from pycaffe_cli.io.foreign import (FIELDS, LAYER_TYPES, UNIMPLEMENTED, layer_type_hint,
                                    parse_error_hint)
from pycaffe_cli.proto import caffe_pb2
from tests.cli.conftest import run_cli  # noqa: F401 (fixture)


INPUT = ('layer { name: "data" type: "Input" top: "data"\n'
         '  input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }\n')
FOREIGN = [  # (net text after the input layer, the error's file:line:col, words it must hold)
    ('layer { name: "pool1" type: "Pooling" bottom: "data" top: "pool1"\n'
     '  pooling_param { pool: MAX kernel_size: 3 stride: 2 ceil_mode: false } }\n',
     ":5:54", ['no field named "ceil_mode"', "round_mode: FLOOR (ceil_mode: false)"]),
    ('layer { name: "pool1" type: "Pooling" bottom: "data" top: "pool1"\n'
     '  pooling_param { pool: AVG kernel_size: 2 } }\n',
     ":5:", ["no value named AVG", "spells average pooling AVE"]),
    ('layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"\n'
     '  convolution_param { num_output: 2 kernel_size: 3 hole: 2 } }\n',
     ":5:52", ['no field named "hole"', "BVLC Caffe calls dilation"]),
    # SSD's video_data_param is in pycaffe's schema: the layer type is what names the fork
    ('layer { name: "video" type: "VideoData" top: "video"\n'
     '  video_data_param { video_type: VIDEO video_file: "a.mp4" } }\n',
     ":4: ", ['layer "video": unknown layer type "VideoData"', "SSD",
              "pycaffe does not implement yet", "BVLC Caffe has no such layer"]),
    ('layer { name: "bn" type: "BN" bottom: "data" top: "bn"\n'
     '  bn_param { frozen: true } }\n',
     ":5:3", ['no field named "bn_param"', "BN layers", "SegNet",
              "a BatchNorm layer followed by a Scale layer"]),
    ('layer { name: "video" type: "VideoData" top: "video" }\n',
     ":4: ", ['layer "video": unknown layer type "VideoData"', "SSD",
              "BVLC Caffe has no such layer"]),
    ('layer { name: "ohem" type: "BoxAnnotatorOHEM" bottom: "data" bottom: "data" top: "o"\n'
     '  box_annotator_ohem_param { roi_per_img: 128 } }\n',
     ":4: ", ['unknown layer type "BoxAnnotatorOHEM"', "R-FCN"]),
    # options the forks add to BVLC's messages, parsed but not implemented yet
    ('layer { name: "d" type: "DummyData" top: "d" dummy_data_param { shape { dim: 1 } }\n'
     '  transform_param { resize_param { height: 300 width: 300 } } }\n',
     ":4: ", ['layer "d": transform_param.resize_param is data augmentation', "SSD",
              "implements only in AnnotatedData and Data layers, not in DummyData layers",
              "transform_param has only scale"]),
    ('layer { name: "d" type: "DummyData" top: "d" dummy_data_param { shape { dim: 1 } }\n'
     '  transform_param { crop_h: 4 crop_w: 6 } }\n',
     ":4: ", ['transform_param { crop_h: 4 }', "SSD", "crops squares of crop_size"]),
    # OpenCV's own additions to SSD's messages
    ('layer { name: "det" type: "DetectionOutput" bottom: "data" bottom: "data"\n'
     '  bottom: "data" top: "det" detection_output_param { num_classes: 2\n'
     '  normalized_bbox: true } }\n',
     ":6:3", ['no field named "normalized_bbox"', "OpenCV", "visualize", "delete the line"]),
    ('layer { name: "pb" type: "PriorBox" bottom: "data" bottom: "data" top: "pb"\n'
     '  prior_box_param { min_size: 4 width: 2 height: 3 } }\n',
     ":5:33", ['no field named "width"', "OpenCV's explicit prior geometry"]),
    ('layer { name: "r6" type: "ReLU6" bottom: "data" top: "r6" }\n',
     ":4: ", ['unknown layer type "ReLU6"', "clip_param { min: 0 max: 6 }"]),
    ('layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"\n'
     '  forward_type: FLOAT16 convolution_param { num_output: 2 kernel_size: 3 } }\n',
     ":5:3", ['no field named "forward_type"', "NVIDIA Caffe", "delete the line"]),
    ('layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"\n'
     '  engine: "MKLDNN" convolution_param { num_output: 2 kernel_size: 3 } }\n',
     ":5:3", ['no field named "engine"', "Intel Caffe", "convolution_param { engine: CAFFE }"]),
]


@pytest.mark.parametrize("body, where, words", FOREIGN)
def test_other_forks_names_point_at_the_bvlc_equivalent(run_cli, write, body, where,  # noqa
                                                        words):
    path = write("net.prototxt", 'name: "fork"\n' + INPUT + body)
    result = run_cli("time", "--model", path, "--iterations", 1)
    assert result.code == 1
    assert len(result.error_lines()) == 1 and "Traceback" not in result.err
    line = result.error_lines()[0]
    assert line.startswith(f"pycaffe: error: {path}{where}")
    for word in words:
        assert word in line


def test_the_nvcaffe_net_field_and_the_cudnn_engine(run_cli, write):  # noqa: F811
    path = write("nv.prototxt", 'name: "nv"\ndefault_forward_type: FLOAT16\n' + INPUT)
    line = run_cli("time", "--model", path, "--iterations", 1).error_lines()[0]
    assert line.startswith(f"pycaffe: error: {path}:2:1: ") and "NVIDIA Caffe" in line
    # engine: CUDNN is BVLC's own and runs
    path = write("cudnn.prototxt", 'name: "c"\n' + INPUT + (
        'layer { name: "c" type: "Convolution" bottom: "data" top: "c"\n'
        '  convolution_param { num_output: 2 kernel_size: 3 engine: CUDNN } }\n'))
    assert run_cli("time", "--model", path, "--iterations", 1).code == 0


def test_the_tables_name_only_what_bvlc_does_not_have():
    descriptor = caffe_pb2.DESCRIPTOR
    for message, field in FIELDS:
        assert field not in descriptor.message_types_by_name[message].fields_by_name
    from pycaffe_cli.layers.base import layer_class, registered_types
    for name in set(LAYER_TYPES) & set(registered_types()):   # the forks' layers built so far
        assert layer_class(name).fork == LAYER_TYPES[name][0]
    assert layer_type_hint("Convolutoin") is None
    assert parse_error_hint('Message type "caffe.LayerParameter" has no field named "x".') is None
    assert "Interp" in parse_error_hint(
        'Message type "caffe.V1LayerParameter" has no field named "interp_param".')
    # the fields of the forks in pycaffe's schema name their fork through the layer type
    assert parse_error_hint(
        'Message type "caffe.LayerParameter" has no field named "norm_param".') is None
    assert "SSD" in layer_type_hint("Normalize")


def test_the_unimplemented_options_are_in_the_schema():
    """Each entry names a field of pycaffe's schema (and an enum value it has), so that none
    can fail to match because of a typo."""
    for key in UNIMPLEMENTED:
        field = getattr(caffe_pb2, key[0]).DESCRIPTOR.fields_by_name[key[1]]
        if len(key) == 3 and field.enum_type is not None:
            assert key[2] in field.enum_type.values_by_name
