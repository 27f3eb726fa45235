"""PriorBox layer (SSD's fork): the fork's own test cases (test_prior_box_layer.cpp), an
element-by-element reference, GPU mode, user errors."""
import math

import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from tests.cli.conftest import run_cli  # noqa: F401 (fixture)
from tests.gpu_helpers import compare_layer_modes
from tests.layer_helpers import set_up

SQRT2 = math.sqrt(2.0)
EPS = 1e-6  # the fork's tests' tolerance


def prior_box(params):
    return f'name: "pb" type: "PriorBox" prior_box_param {{ {params} }}'


def run(params, feature=(10, 10, 10, 10), image=(10, 3, 100, 100)):
    """The top (2, count) after a forward pass over zero bottoms of these shapes."""
    layer, bottom, top = set_up(prior_box(params), [np.zeros(feature), np.zeros(image)])
    layer.forward(bottom, top)
    assert top[0].shape[:2] == (1, 2)
    return top[0].data.reshape(2, -1)


def reference(params_lists, layer_hw, img_hw, step_hw=None, offset=0.5, clip=False,
              variance=(0.1,)):
    """The fork's priors written out cell by cell in float64: for each min_size, the min box,
    the sqrt(min * max) box, then the aspect ratios' boxes on the min size."""
    min_sizes, max_sizes, ratios = params_lists
    layer_h, layer_w = layer_hw
    img_h, img_w = img_hw
    step_h, step_w = step_hw or (img_h / layer_h, img_w / layer_w)
    boxes = []
    for h in range(layer_h):
        for w in range(layer_w):
            cx, cy = (w + offset) * step_w, (h + offset) * step_h
            for k, low in enumerate(min_sizes):
                low = int(low)
                sides = [(low, low)]
                if max_sizes:
                    side = math.sqrt(low * int(max_sizes[k]))
                    sides.append((side, side))
                sides += [(low * math.sqrt(r), low / math.sqrt(r)) for r in ratios]
                for bw, bh in sides:
                    boxes.append([(cx - bw / 2) / img_w, (cy - bh / 2) / img_h,
                                  (cx + bw / 2) / img_w, (cy + bh / 2) / img_h])
    boxes = np.array(boxes).reshape(-1)
    if clip:
        boxes = np.clip(boxes, 0, 1)
    return np.stack([boxes, np.resize(np.array(variance), boxes.size)])


# --- the fork's tests: 10x10 feature map, 100x100 image, min_size 4, max_size 9 ----------------
@pytest.mark.parametrize("params, per_cell", [
    ("min_size: 4 max_size: 9", 2),                                          # TestSetup
    ("min_size: 4 min_size: 14 max_size: 9 max_size: 19", 4),                # ...MultiSize
    ("min_size: 4", 1),                                                      # ...NoMaxSize
    ("min_size: 4 min_size: 14", 2),                                # ...MultiSizeNoMaxSize
    ("min_size: 4 max_size: 9 aspect_ratio: 1 aspect_ratio: 2 flip: false", 3),  # ...Ratio1
    ("min_size: 4 max_size: 9 aspect_ratio: 2 aspect_ratio: 3 flip: false", 4),
    ("min_size: 4 max_size: 9 aspect_ratio: 2 aspect_ratio: 3", 6),          # ...AspectRatio
    ("min_size: 4 min_size: 14 max_size: 9 max_size: 19 aspect_ratio: 2 aspect_ratio: 3", 12),
    ("min_size: 4 aspect_ratio: 2 aspect_ratio: 0.5", 3),   # 0.5 is 2's flip: dropped
])
def test_the_forks_setup_counts(params, per_cell):
    layer, _, top = set_up(prior_box(params), [np.zeros((10, 10, 10, 10)),
                                               np.zeros((10, 3, 100, 100))])
    assert top[0].shape == (1, 2, 100 * per_cell * 4)
    assert layer.num_priors == per_cell


def expect(data, index, values):
    np.testing.assert_allclose(data[index:index + len(values)], values, rtol=0, atol=EPS)


@pytest.mark.parametrize("params, variance", [
    ("min_size: 4 max_size: 9", [0.1]),                                      # TestCPU
    ("min_size: 4 max_size: 9 variance: 1", [1.0]),                          # ...Variance1
    ("min_size: 4 max_size: 9 variance: 0.1 variance: 0.2 variance: 0.3 variance: 0.4",
     [0.1, 0.2, 0.3, 0.4]),                                                  # ...VarianceMulti
])
def test_the_forks_values(params, variance):
    top = run(params)
    boxes = top[0]
    expect(boxes, 0, [0.03, 0.03, 0.07, 0.07])
    expect(boxes, 4, [0.02, 0.02, 0.08, 0.08])
    expect(boxes, 4 * 10 * 2 * 4 + 4 * 2 * 4, [0.43, 0.43, 0.47, 0.47])
    np.testing.assert_allclose(top[1], np.resize(variance, top[1].size), atol=EPS)


def test_the_forks_values_without_max_size():                               # TestCPUNoMaxSize
    boxes = run("min_size: 4")[0]
    expect(boxes, 0, [0.03, 0.03, 0.07, 0.07])
    expect(boxes, 4 * 10 * 1 * 4 + 4 * 1 * 4, [0.43, 0.43, 0.47, 0.47])


@pytest.mark.parametrize("flip", [False, True])                  # TestCPUAspectRatio(NoFlip)
def test_the_forks_aspect_ratio_values(flip):
    boxes = run(f"min_size: 4 max_size: 9 aspect_ratio: 2 flip: {str(flip).lower()}")[0]
    per_cell = 4 if flip else 3
    a, b = 0.02 * SQRT2, 0.01 * SQRT2
    expect(boxes, 0, [0.03, 0.03, 0.07, 0.07, 0.02, 0.02, 0.08, 0.08])
    expect(boxes, 8, [0.05 - a, 0.05 - b, 0.05 + a, 0.05 + b])
    cell = 4 * 10 * per_cell * 4 + 4 * per_cell * 4
    expect(boxes, cell, [0.43, 0.43, 0.47, 0.47])
    expect(boxes, cell + 8, [0.45 - a, 0.45 - b, 0.45 + a, 0.45 + b])
    if flip:
        expect(boxes, 12, [0.05 - b, 0.05 - a, 0.05 + b, 0.05 + a])
        expect(boxes, cell + 12, [0.45 - b, 0.45 - a, 0.45 + b, 0.45 + a])


def test_the_forks_multi_size_values_with_clip():               # TestCPUAspectRatioMultiSize
    boxes = run("min_size: 4 min_size: 8 max_size: 9 max_size: 18 aspect_ratio: 2 "
                "clip: true")[0]
    a, b, c = 0.02 * SQRT2, 0.01 * SQRT2, 0.04
    expect(boxes, 0, [0.03, 0.03, 0.07, 0.07, 0.02, 0.02, 0.08, 0.08])
    expect(boxes, 8, [0.05 - a, 0.05 - b, 0.05 + a, 0.05 + b])
    expect(boxes, 12, [0.05 - b, 0.05 - a, 0.05 + b, 0.05 + a])
    expect(boxes, 16, [0.01, 0.01, 0.09, 0.09, 0.0, 0.0, 0.11, 0.11])
    expect(boxes, 24, [0.0, 0.05 - c / SQRT2, 0.05 + c * SQRT2, 0.05 + c / SQRT2])
    expect(boxes, 28, [0.05 - c / SQRT2, 0.0, 0.05 + c / SQRT2, 0.05 + c * SQRT2])
    cell = 8 * 10 * 4 * 4 + 8 * 4 * 4
    expect(boxes, cell, [0.43, 0.43, 0.47, 0.47])
    expect(boxes, cell + 8, [0.45 - a, 0.45 - b, 0.45 + a, 0.45 + b])
    expect(boxes, cell + 12, [0.45 - b, 0.45 - a, 0.45 + b, 0.45 + a])


def test_the_forks_fixed_step_values():                                      # TestCPUFixStep
    boxes = run("min_size: 4 max_size: 9 aspect_ratio: 2 img_size: 100 step: 10",
                feature=(10, 10, 20, 10), image=(10, 3, 200, 100))[0]
    assert boxes.size == 20 * 10 * 4 * 4
    a, b = 0.02 * SQRT2, 0.01 * SQRT2
    expect(boxes, 0, [0.03, 0.03, 0.07, 0.07, 0.02, 0.02, 0.08, 0.08])
    expect(boxes, 8, [0.05 - a, 0.05 - b, 0.05 + a, 0.05 + b])
    cell = 14 * 10 * 4 * 4 + 4 * 4 * 4
    expect(boxes, cell, [0.43, 1.43, 0.47, 1.47])
    expect(boxes, cell + 8, [0.45 - a, 1.45 - b, 0.45 + a, 1.45 + b])
    expect(boxes, cell + 12, [0.45 - b, 1.45 - a, 0.45 + b, 1.45 + a])


# --- against the reference -------------------------------------------------------------------
# float32 results of float32 centres and sides: within a few float32 ulps of the float64 values
TOL = dict(rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("params, lists, extra", [
    # SSD300's conv4_3 head on a 5x3 map of a 300x200 image
    ("min_size: 30 max_size: 60 aspect_ratio: 2 variance: 0.1 variance: 0.1 variance: 0.2 "
     "variance: 0.2 step: 8 offset: 0.5", ([30], [60], [2, 0.5]),
     dict(step_hw=(8, 8), variance=(0.1, 0.1, 0.2, 0.2))),
    ("min_size: 35.84 max_size: 76.8 aspect_ratio: 2 aspect_ratio: 3 flip: true clip: true",
     ([35.84], [76.8], [2, 0.5, 3, 1 / 3]), dict(clip=True)),      # sizes truncate
    ("min_size: 20 min_size: 50 aspect_ratio: 3 flip: false img_h: 90 img_w: 120 "
     "step_h: 16 step_w: 12 offset: 0.25", ([20, 50], [], [3]),
     dict(step_hw=(16, 12), offset=0.25)),
])
def test_priors_match_the_reference(params, lists, extra):
    img_hw = (90, 120) if "img_h" in params else (300, 200)
    top = run(params, feature=(1, 8, 5, 3), image=(1, 3, 300, 200))
    np.testing.assert_allclose(top, reference(lists, (5, 3), img_hw, **extra), **TOL)


def test_reshape_follows_a_new_feature_map():
    layer, bottom, top = set_up(prior_box("min_size: 10 aspect_ratio: 2"),
                                [np.zeros((1, 1, 2, 2)), np.zeros((1, 3, 40, 40))])
    layer.forward(bottom, top)
    bottom[0].reshape((1, 1, 4, 5))
    layer.forward(bottom, top)
    assert top[0].shape == (1, 2, 4 * 5 * 3 * 4)
    np.testing.assert_allclose(top[0].data.reshape(2, -1),
                               reference(([10], [], [2, 0.5]), (4, 5), (40, 40)), **TOL)


def test_gpu_mode_writes_the_top_on_the_device_without_a_fallback(monkeypatch):
    logged = []
    monkeypatch.setattr(backend, "log_once", lambda key, message: logged.append(message))
    compare_layer_modes(prior_box("min_size: 4 max_size: 9 aspect_ratio: 2 clip: true"),
                        [np.zeros((1, 2, 3, 2)), np.zeros((1, 3, 30, 20))], rtol=0, atol=0)
    assert logged == []


@pytest.mark.parametrize("params, message", [
    ("", "must provide min_size"),
    ("max_size: 9", "must provide min_size"),
    ("min_size: 0", "min_size must be positive"),
    ("min_size: 4 max_size: 4", "max_size must be greater than min_size, got max_size 4 for "
                                "min_size 4"),
    ("min_size: 10 max_size: 5", "max_size must be greater than min_size"),
    ("min_size: 4 min_size: 8 max_size: 9", "1 max_size value.* for 2 min_size"),
    ("min_size: 4 variance: 0.1 variance: 0.2", "1 or 4 variance values, got 2"),
    ("min_size: 4 variance: 0", "variance must be positive"),
    ("min_size: 4 aspect_ratio: 0", "aspect_ratio must be positive"),
    ("min_size: 4 img_size: 100 img_h: 100 img_w: 100", "either img_size or img_h/img_w"),
    ("min_size: 4 img_h: 100", "img_w should be larger than 0"),
    ("min_size: 4 step: 8 step_w: 8 step_h: 8", "either step or step_h/step_w"),
    ("min_size: 4 step: 0", "step should be larger than 0"),
])
def test_user_errors_name_the_layer(params, message):
    with pytest.raises(CaffeError, match=f'layer "pb".*{message}'):
        set_up(prior_box(params), [np.zeros((1, 1, 2, 2)), np.zeros((1, 3, 8, 8))])


def test_a_feature_map_without_cells_is_an_error():
    with pytest.raises(CaffeError, match='layer "pb".*no cells'):
        set_up(prior_box("min_size: 4"), [np.zeros((1, 1, 0, 2)), np.zeros((1, 3, 8, 8))])


SSD_HEAD = """name: "ssd_head"
force_backward: true
layer { name: "data" type: "Input" top: "data" top: "feature"
  input_param { shape { dim: 2 dim: 3 dim: 16 dim: 16 } shape { dim: 2 dim: 12 dim: 8 dim: 8 } } }
layer { name: "loc" type: "Normalize" bottom: "feature" top: "loc"
  norm_param { across_spatial: false channel_shared: false
               scale_filler { type: "constant" value: 20 } } }
layer { name: "loc_perm" type: "Permute" bottom: "loc" top: "loc_perm"
  permute_param { order: 0 order: 2 order: 3 order: 1 } }
layer { name: "loc_flat" type: "Flatten" bottom: "loc_perm" top: "loc_flat" }
layer { name: "priorbox" type: "PriorBox" bottom: "loc" bottom: "data" top: "priorbox"
  prior_box_param { min_size: 4 max_size: 8 aspect_ratio: 2 flip: false clip: true
                    variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2 } }
layer { name: "prior_flat" type: "Flatten" bottom: "priorbox" top: "prior_flat" }
layer { name: "boxes" type: "Slice" bottom: "prior_flat" top: "boxes" top: "variances"
  slice_param { axis: 1 } }
layer { name: "silence" type: "Silence" bottom: "variances" }
layer { name: "target" type: "DummyData" top: "target"
  dummy_data_param { shape { dim: 2 dim: 768 } data_filler { type: "gaussian" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "loc_flat" bottom: "target" top: "loss" }
"""


def test_an_ssd_head_runs_forward_and_backward():
    """Normalize -> Permute -> Flatten beside PriorBox, as SSD's nets wire their heads (with
    a convolution between Normalize and Permute): 8x8 cells x 3 priors x 4 coordinates, the
    same count on both sides."""
    from google.protobuf import text_format
    from pycaffe_cli.net.net import Net
    from pycaffe_cli.proto import caffe_pb2
    param = text_format.Parse(SSD_HEAD, caffe_pb2.NetParameter())
    net = Net(param, caffe_pb2.TRAIN)
    feature = np.random.default_rng(0).normal(size=(2, 12, 8, 8))
    net.blob_by_name("feature").data[...] = feature
    loss = net.forward()
    assert np.isfinite(loss)
    assert net.blob_by_name("loc_flat").shape == (2, 8 * 8 * 3 * 4)
    boxes = net.blob_by_name("boxes").data.reshape(-1)
    np.testing.assert_allclose(boxes, reference(([4], [8], [2]), (8, 8), (16, 16), clip=True)[0],
                               **TOL)
    net.backward()
    assert np.all(net.layer_by_name("loc").blobs[0].diff != 0)
    assert np.abs(net.blob_by_name("feature").diff).sum() > 0


@pytest.mark.parametrize("layer, words", [
    ('layer { name: "pb" type: "PriorBox" bottom: "data" bottom: "data" top: "pb"\n'
     '  prior_box_param { min_size: 8 max_size: 8 } }\n',
     ['layer "pb"', "max_size must be greater than min_size"]),
    ('layer { name: "pb" type: "PriorBox" bottom: "data" bottom: "data" top: "pb" }\n',
     ['layer "pb"', "must provide min_size"]),
])
def test_the_command_line_reports_one_line(run_cli, write, layer, words):  # noqa: F811
    path = write("net.prototxt", 'name: "n"\nlayer { name: "data" type: "Input" top: "data"\n'
                 '  input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }\n' + layer)
    result = run_cli("time", "--model", path, "--iterations", 1)
    assert result.code == 1 and "Traceback" not in result.err
    assert len(result.error_lines()) == 1
    line = result.error_lines()[0]
    assert line.startswith(f"pycaffe: error: {path}:4:")
    for word in words:
        assert word in line
