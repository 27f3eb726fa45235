"""DetectionOutput (SSD): the fork's test_detection_output_layer.cpp cases, an independent
reference on random inputs (share_location, background_label_id -1, keep_top_k,
confidence_threshold, eta, the three code types, the variance either way), the placeholder
top when nothing is kept, GPU mode, the result files of save_output_param, and the refused
options."""
import math

import numpy as np
import pytest

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from tests.layer_helpers import set_up

NUM, NUM_PRIORS, NUM_CLASSES = 2, 4, 2


def fork_priors():
    """Four 0.3 x 0.3 priors on a 2 x 2 grid, variances 0.1 (the fork's test fixture)."""
    boxes = []
    for h in range(2):
        for w in range(2):
            cx, cy = (w + 0.5) * 0.5, (h + 0.5) * 0.5
            boxes += [cx - 0.15, cy - 0.15, cx + 0.15, cy + 0.15]
    prior = np.zeros((NUM, 2, NUM_PRIORS * 4, 1), np.float32)
    prior[0, 0, :, 0] = boxes
    prior[0, 1, :, 0] = 0.1
    return prior


def fork_conf():
    conf = np.zeros((NUM, NUM_PRIORS * NUM_CLASSES, 1, 1), np.float32)
    for i in range(NUM):
        for j in range(NUM_PRIORS):
            for c in range(NUM_CLASSES):
                conf[i, j * NUM_CLASSES + c] = j * 0.2 if i % 2 == c % 2 else 1 - j * 0.2
    return conf


def fork_loc(share_location):
    classes = 1 if share_location else NUM_CLASSES
    values = []
    for i in range(NUM):
        for h in range(2):
            for w in range(2):
                for c in range(classes):
                    v = i + c / 2. + 0.5
                    sx, sy = (-1 if w % 2 else 1) * v, (-1 if h % 2 else 1) * v
                    values += [sx, sy, sx, sy]
    return np.array(values, np.float32).reshape(NUM, -1, 1, 1)


def param(num_classes=NUM_CLASSES, extra="", nms="nms_threshold: 0.1"):
    return (f'name: "det" type: "DetectionOutput" detection_output_param {{ '
            f'num_classes: {num_classes} nms_param {{ {nms} }} {extra} }}')


FORK_CASES = {
    "ShareLocation": ("share_location: true background_label_id: 0", [
        "0 1 1.0 0.15 0.15 0.45 0.45", "0 1 0.8 0.55 0.15 0.85 0.45",
        "0 1 0.6 0.15 0.55 0.45 0.85", "0 1 0.4 0.55 0.55 0.85 0.85",
        "1 1 0.6 0.45 0.45 0.75 0.75", "1 1 0.0 0.25 0.25 0.55 0.55"]),
    "ShareLocationTopK": ("share_location: true background_label_id: 0", [
        "0 1 1.0 0.15 0.15 0.45 0.45", "0 1 0.8 0.55 0.15 0.85 0.45",
        "1 1 0.6 0.45 0.45 0.75 0.75"]),
    "NoShareLocation": ("share_location: false background_label_id: -1", [
        "0 0 0.6 0.55 0.55 0.85 0.85", "0 0 0.4 0.15 0.55 0.45 0.85",
        "0 0 0.2 0.55 0.15 0.85 0.45", "0 0 0.0 0.15 0.15 0.45 0.45",
        "0 1 1.0 0.20 0.20 0.50 0.50", "0 1 0.8 0.50 0.20 0.80 0.50",
        "0 1 0.6 0.20 0.50 0.50 0.80", "0 1 0.4 0.50 0.50 0.80 0.80",
        "1 0 1.0 0.25 0.25 0.55 0.55", "1 0 0.4 0.45 0.45 0.75 0.75",
        "1 1 0.6 0.40 0.40 0.70 0.70"]),
    "NoShareLocationTopK": ("share_location: false background_label_id: -1", [
        "0 0 0.6 0.55 0.55 0.85 0.85", "0 0 0.4 0.15 0.55 0.45 0.85",
        "0 1 1.0 0.20 0.20 0.50 0.50", "0 1 0.8 0.50 0.20 0.80 0.50",
        "1 0 1.0 0.25 0.25 0.55 0.55", "1 1 0.6 0.40 0.40 0.70 0.70"]),
    "NoShareLocationNeg0": ("share_location: false background_label_id: 0", [
        "0 1 1.0 0.20 0.20 0.50 0.50", "0 1 0.8 0.50 0.20 0.80 0.50",
        "0 1 0.6 0.20 0.50 0.50 0.80", "0 1 0.4 0.50 0.50 0.80 0.80",
        "1 1 0.6 0.40 0.40 0.70 0.70"]),
    "NoShareLocationNeg0TopK": ("share_location: false background_label_id: 0", [
        "0 1 1.0 0.20 0.20 0.50 0.50", "0 1 0.8 0.50 0.20 0.80 0.50",
        "1 1 0.6 0.40 0.40 0.70 0.70"]),
}


@pytest.mark.parametrize("case", sorted(FORK_CASES))
def test_the_forks_cases(engine, case):
    extra, rows = FORK_CASES[case]
    nms = "nms_threshold: 0.1" + (" top_k: 2" if case.endswith("TopK") else "")
    layer, bottom, top = set_up(param(extra=extra, nms=nms),
                                [fork_loc("true" in extra), fork_conf(), fork_priors()])
    assert top[0].shape == (1, 1, 1, 7)
    layer.forward(bottom, top)
    expected = np.array([[float(v) for v in row.split()] for row in rows], np.float32)
    assert top[0].shape == (1, 1, len(rows), 7)
    np.testing.assert_allclose(top[0].cpu_data[0, 0], expected, atol=1e-6)
    if engine == "gpu":  # what a GPU-mode consumer reads
        np.testing.assert_array_equal(top[0].gpu_data.copy_to_host().reshape(-1, 7),
                                      top[0].cpu_data[0, 0])


# --- an independent reference ---------------------------------------------------------------------
def reference_decode(prior, var, code_type, in_target, loc):
    px0, py0, px1, py1 = map(float, prior)
    pw, ph = px1 - px0, py1 - py0
    d = [float(x) if in_target else float(x) * float(v) for x, v in zip(loc, var)]
    if code_type == 1:
        return [px0 + d[0], py0 + d[1], px1 + d[2], py1 + d[3]]
    if code_type == 3:
        return [px0 + d[0] * pw, py0 + d[1] * ph, px1 + d[2] * pw, py1 + d[3] * ph]
    cx, cy = (px0 + px1) / 2 + d[0] * pw, (py0 + py1) / 2 + d[1] * ph
    w, h = math.exp(d[2]) * pw, math.exp(d[3]) * ph
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


def reference_iou(a, b):
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0

    def area(box):
        return max(box[2] - box[0], 0) * max(box[3] - box[1], 0)
    return w * h / (area(a) + area(b) - w * h)


def reference_detections(loc, conf, prior, num_classes, share, background, code_type,
                         in_target, threshold, nms_threshold, eta, top_k, keep_top_k):
    num, num_priors = conf.shape[0], conf.size // conf.shape[0] // num_classes
    loc_classes = 1 if share else num_classes
    loc = loc.reshape(num, num_priors, loc_classes, 4)
    conf = conf.reshape(num, num_priors, num_classes)
    priors = prior.reshape(-1)[:num_priors * 4].reshape(-1, 4)
    variances = prior.reshape(-1)[num_priors * 4:num_priors * 8].reshape(-1, 4)
    rows = []
    for i in range(num):
        found = []  # (label, prior, score, box)
        for c in range(num_classes):
            if c == background:
                continue
            lc = 0 if share else c
            boxes = [reference_decode(priors[p], variances[p], code_type, in_target,
                                      loc[i, p, lc]) for p in range(num_priors)]
            order = sorted((p for p in range(num_priors) if conf[i, p, c] > threshold),
                           key=lambda p: -conf[i, p, c])
            if top_k > -1:
                order = order[:top_k]
            kept, limit = [], nms_threshold
            for p in order:
                if all(reference_iou(boxes[p], boxes[k]) <= limit for k in kept):
                    kept.append(p)
                    if eta < 1 and limit > 0.5:
                        limit *= eta
            found += [(c, p, float(conf[i, p, c]), boxes[p]) for p in kept]
        if keep_top_k > -1 and len(found) > keep_top_k:
            found = sorted(found, key=lambda f: -f[2])[:keep_top_k]
            found.sort(key=lambda f: f[0])
        rows += [[i, c, score] + box for c, p, score, box in found]
    return np.array(rows, np.float64).reshape(-1, 7)


CONFIGS = [
    # share, background, code_type, in_target, threshold, nms, eta, top_k, keep_top_k
    (True, 0, 2, False, None, 0.45, 1.0, -1, -1),
    (True, 0, 2, True, 0.2, 0.45, 1.0, 30, 12),
    (False, -1, 1, False, 0.1, 0.5, 1.0, -1, -1),
    (False, 0, 3, True, None, 0.3, 1.0, 10, 7),
    (False, 2, 3, False, 0.15, 0.7, 0.8, -1, 20),
    (True, -1, 1, True, 0.25, 0.9, 0.6, -1, 5),  # the fork's CPU pass aborts here
    (True, 0, 1, False, 0.3, 0.5, 1.0, -1, 0),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_matches_the_reference(config):
    share, background, code_type, in_target, threshold, nms, eta, top_k, keep_top_k = config
    rng = np.random.default_rng(len(str(config)))
    num, num_priors, num_classes = 3, 40, 4
    lo = rng.uniform(0, 0.7, (num_priors, 2))
    priors = np.concatenate([lo, lo + rng.uniform(0.1, 0.3, (num_priors, 2))], 1)
    variances = rng.uniform(0.1, 0.3, (num_priors, 4))
    prior = np.stack([priors.ravel(), variances.ravel()])[None].astype(np.float32)
    loc_classes = 1 if share else num_classes
    loc = rng.uniform(-1, 1, (num, num_priors * loc_classes * 4)).astype(np.float32)
    conf = rng.dirichlet(np.ones(num_classes), (num, num_priors)).astype(np.float32)
    conf = conf.reshape(num, -1)
    extra = (f"share_location: {str(share).lower()} background_label_id: {background} "
             f"code_type: {code_type} variance_encoded_in_target: {str(in_target).lower()} "
             f"keep_top_k: {keep_top_k}")
    if threshold is not None:
        extra += f" confidence_threshold: {threshold}"
    nms_text = f"nms_threshold: {nms} eta: {eta}" + (f" top_k: {top_k}" if top_k > -1 else "")
    layer, bottom, top = set_up(param(num_classes, extra, nms_text), [loc, conf, prior])
    layer.forward(bottom, top)
    expected = reference_detections(
        loc, conf, prior, num_classes, share, background, code_type, in_target,
        -np.finfo(np.float32).max if threshold is None else np.float32(threshold),
        nms, eta, top_k, keep_top_k)
    if len(expected) == 0:
        expected = np.full((num, 7), -1.0)
        expected[:, 0] = np.arange(num)
    got = top[0].cpu_data.reshape(-1, 7)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got[:, :2], expected[:, :2])
    # scores are copied; boxes are a few float32 operations on values below ~10
    np.testing.assert_allclose(got[:, 2:], expected[:, 2:], rtol=1e-5, atol=1e-5)


def test_nothing_kept_gives_one_placeholder_row_per_image(engine):
    text = param(extra="confidence_threshold: 1.5")
    layer, bottom, top = set_up(text, [fork_loc(True), fork_conf(), fork_priors()])
    layer.forward(bottom, top)
    expected = np.full((NUM, 7), -1, np.float32)
    expected[:, 0] = np.arange(NUM)
    assert top[0].shape == (1, 1, NUM, 7)
    np.testing.assert_array_equal(top[0].cpu_data[0, 0], expected)


def test_an_image_without_detections_has_no_row():
    conf = fork_conf()
    conf[1] = 0  # image 1 scores nothing above the threshold
    layer, bottom, top = set_up(param(extra="confidence_threshold: 0.01"),
                                [fork_loc(True), conf, fork_priors()])
    layer.forward(bottom, top)
    assert top[0].shape == (1, 1, 4, 7)
    assert set(top[0].cpu_data[0, 0, :, 0]) == {0}


def test_keep_top_k_orders_by_label_then_score():
    # image 0: class 0 keeps prior 3 (0.6), class 1 keeps priors 0 (1.0) and 1 (0.8)
    extra = "share_location: false background_label_id: -1 keep_top_k: 3"
    layer, bottom, top = set_up(param(extra=extra),
                                [fork_loc(False), fork_conf(), fork_priors()])
    layer.forward(bottom, top)
    rows = top[0].cpu_data[0, 0]
    image0 = rows[rows[:, 0] == 0][:, 1:3]
    np.testing.assert_allclose(image0, [[0, 0.6], [1, 1.0], [1, 0.8]], atol=1e-6)


def test_clip_keeps_boxes_in_the_unit_square():
    loc = fork_loc(True) * 10
    layer, bottom, top = set_up(param(extra="clip: true", nms="nms_threshold: 1"),
                                [loc, fork_conf(), fork_priors()])
    layer.forward(bottom, top)
    boxes = top[0].cpu_data[0, 0, :, 3:]
    assert boxes.min() >= 0 and boxes.max() <= 1


def test_backward_does_nothing(engine):
    layer, bottom, top = set_up(param(), [fork_loc(True), fork_conf(), fork_priors()])
    layer.forward(bottom, top)
    layer.backward(top, [True, True, False], bottom)
    assert not layer.allow_force_backward(0)


def test_gpu_mode_has_its_own_pass_without_fallback_warning(caplog):
    from tests.gpu_helpers import skip_without_cuda
    skip_without_cuda()
    backend.set_mode_gpu(0)
    try:
        layer, bottom, top = set_up(param(), [fork_loc(True), fork_conf(), fork_priors()])
        assert layer._use_gpu("forward")
        layer.forward(bottom, top)
    finally:
        backend.set_mode_cpu()
    assert "no GPU forward" not in caplog.text
    assert top[0].shape == (1, 1, 6, 7)


@pytest.mark.parametrize("extra, nms, words", [
    ("", "nms_threshold: -0.1", "nms_threshold must be non negative"),
    ("", "eta: 0", "eta must be in (0, 1]"),
    ("", "eta: 1.5", "eta must be in (0, 1]"),
    ("visualize: true", "", "visualize"),
])
def test_bad_params_are_one_clear_error(extra, nms, words):
    with pytest.raises(CaffeError) as error:
        set_up(param(extra=extra, nms=nms), [fork_loc(True), fork_conf(), fork_priors()])
    assert words in str(error.value) and '"det"' in str(error.value)


def test_missing_num_classes_and_mismatched_shapes_are_errors():
    text = 'name: "det" type: "DetectionOutput" detection_output_param { }'
    with pytest.raises(CaffeError, match="num_classes"):
        set_up(text, [fork_loc(True), fork_conf(), fork_priors()])
    with pytest.raises(CaffeError, match="location predictions"):
        set_up(param(), [fork_loc(False), fork_conf(), fork_priors()])
    with pytest.raises(CaffeError, match="confidence predictions"):
        set_up(param(num_classes=3), [fork_loc(True), fork_conf(), fork_priors()])
    with pytest.raises(CaffeError, match="same number of images"):
        set_up(param(), [fork_loc(True), fork_conf()[:1], fork_priors()])


# Scores through three identity layers, so that the plan's blobs can share buffers (and the
# detections through one more, so that they move too, their shape changing with the data).
IDENTITIES = "".join(f'layer {{ name: "i{k}" type: "Power" bottom: "{a}" top: "{b}" }}\n'
                     for k, (a, b) in enumerate([("conf", "c1"), ("c1", "c2"), ("c2", "c3")]))


@pytest.mark.parametrize("trial", [False, True])
def test_in_a_net_and_its_inference_plan(trial, monkeypatch):
    """The top's size follows the scores: the plan runs the layer's full forward each time,
    passes of its blob layout trial (inference/plan.py) included."""
    from google.protobuf import text_format

    from pycaffe_cli.inference import memory
    from pycaffe_cli.inference.plan import InferencePlan
    from pycaffe_cli.net.net import Net
    from pycaffe_cli.proto import caffe_pb2
    if trial:
        monkeypatch.setattr(memory, "own_buffers_limit", lambda: 1 << 40)
    scores = "c3" if trial else "conf"
    text = """
        layer { name: "loc" type: "Input" top: "loc" input_param { shape { dim: 2 dim: 16 } } }
        layer { name: "conf" type: "Input" top: "conf" input_param { shape { dim: 2 dim: 8 } } }
        layer { name: "prior" type: "Input" top: "prior"
                input_param { shape { dim: 1 dim: 2 dim: 16 } } }
        """ + (IDENTITIES if trial else "") + f"""
        layer {{ name: "det" type: "DetectionOutput" bottom: "loc" bottom: "{scores}"
                bottom: "prior" top: "det" detection_output_param {{ num_classes: 2
                nms_param {{ nms_threshold: 0.1 }} confidence_threshold: 0.5 }} }}
        """ + ('layer { name: "copy" type: "Power" bottom: "det" top: "out" }' if trial else "")
    net = Net(text_format.Parse(text, caffe_pb2.NetParameter()), caffe_pb2.TEST)
    net.blob_by_name("loc").data[...] = fork_loc(True).reshape(2, 16)
    net.blob_by_name("prior").data[...] = fork_priors()[:1].reshape(1, 2, 16)
    plan = InferencePlan(net)
    assert plan.memory.both == trial
    for scale, rows in [(1.0, 4), (0.0, 2), (0.7, 2)] * (4 if trial else 1):
        # scale 1: the fork's scores; 0: nothing over 0.5 (a placeholder row per image)
        conf = fork_conf().reshape(2, 8) * scale + (1 - scale) * 0.2
        net.blob_by_name("conf").data[...] = conf
        plan.forward()
        got = net.blob_by_name("out" if trial else "det").cpu_data  # det moves in the trial
        layer, bottom, top = set_up(param(extra="confidence_threshold: 0.5"),
                                    [fork_loc(True), conf, fork_priors()])
        layer.forward(bottom, top)
        assert got.shape == (1, 1, rows, 7)
        np.testing.assert_array_equal(got, top[0].cpu_data)


# --- save_output_param ----------------------------------------------------------------------------
LABEL_MAP = """item { name: "background" label: 0 display_name: "background" }
item { name: "cat" label: 1 display_name: "Cat" }
"""


def save_param(tmp_path, output_format, extra=""):
    (tmp_path / "labels.prototxt").write_text(LABEL_MAP)
    (tmp_path / "sizes.txt").write_text("img_a 100 200\nimg_b 50 40\n")
    return param(extra=f'save_output_param {{ output_directory: "{tmp_path / "out"}" '
                       f'output_name_prefix: "det_" output_format: "{output_format}" '
                       f'label_map_file: "{tmp_path / "labels.prototxt"}" '
                       f'name_size_file: "{tmp_path / "sizes.txt"}" {extra} }}')


# The fork's ShareLocation detections in the pixels of img_a (200 x 100) and img_b (40 x 50):
# corners rounded to 2 decimals, x, y, width and height truncated to integers.
PIXEL_ROWS = [("img_a", "1", "30 15 90 45"), ("img_a", "0.8", "110 15 170 45"),
              ("img_a", "0.6", "30 55 90 85"), ("img_a", "0.4", "110 55 170 85"),
              ("img_b", "0.6", "18 22 30 37"), ("img_b", "0", "10 12 22 27")]


def run_saving(text, batches=1):
    layer, bottom, top = set_up(text, [fork_loc(True), fork_conf(), fork_priors()])
    for _ in range(batches):
        layer.forward(bottom, top)


def test_voc_result_files(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")  # the fork would delete it
    run_saving(save_param(tmp_path, "VOC"))
    lines = (tmp_path / "out" / "det_cat.txt").read_text().splitlines()
    assert lines == [f"{name} {score} {box}" for name, score, box in PIXEL_ROWS]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["det_cat.txt", "keep.txt"]


def test_ilsvrc_and_coco_result_files(tmp_path):
    run_saving(save_param(tmp_path, "ILSVRC"))
    lines = (tmp_path / "out" / "det_.txt").read_text().splitlines()
    assert lines == [f"{name} 1 {score} {box}" for name, score, box in PIXEL_ROWS]
    run_saving(save_param(tmp_path, "COCO"))
    import json
    detections = json.loads((tmp_path / "out" / "det_.json").read_text())["detections"]
    assert [d["image_id"] for d in detections] == [row[0] for row in PIXEL_ROWS]
    assert {d["category_id"] for d in detections} == {"cat"}
    assert detections[0]["bbox"] == [30, 15, 60, 30] and detections[0]["score"] == 1
    np.testing.assert_allclose(detections[4]["bbox"], [18, 22.5, 12, 15], atol=1e-6)


def test_files_are_written_every_num_test_image_images(tmp_path):
    # a round of one image: each image is the file's first (img_a) and rewrites the files
    text = save_param(tmp_path, "VOC", "num_test_image: 1")
    layer, bottom, top = set_up(text, [fork_loc(True), fork_conf(), fork_priors()])
    writer = layer.writer
    writer.add_batch(1, top[0].cpu_data.reshape(-1, 7)[:0])
    assert (tmp_path / "out" / "det_cat.txt").read_text() == ""
    layer.forward(bottom, top)
    lines = (tmp_path / "out" / "det_cat.txt").read_text().splitlines()
    # image 1 of the batch wrote last, in img_a's pixels
    assert lines == ["img_a 0.6 90 45 150 75", "img_a 0 50 25 110 55"]


def test_output_box_undoes_the_resize():
    from pycaffe_cli.detection.pixels import output_boxes
    from pycaffe_cli.proto import caffe_pb2

    def output_box(box, height, width, resize):
        return output_boxes(box, height, width, resize)[0][0]
    resize = caffe_pb2.ResizeParameter(resize_mode=caffe_pb2.ResizeParameter.WARP,
                                       height=300, width=300)
    np.testing.assert_allclose(output_box([-0.1, 0.2, 0.5, 1.2], 100, 200, resize),
                               [0, 20, 100, 100], atol=1e-4)
    # a 200 x 100 image padded into 300 x 300: it fills rows 0.25 to 0.75
    resize.resize_mode = caffe_pb2.ResizeParameter.FIT_LARGE_SIZE_AND_PAD
    np.testing.assert_allclose(output_box([0.1, 0.25, 0.5, 0.5], 100, 200, resize),
                               [20, 0, 100, 50], atol=1e-4)
    # no overlap with the image: the box is only clipped and scaled
    np.testing.assert_allclose(output_box([0.1, 0.0, 0.5, 0.2], 100, 200, resize),
                               [20, 0, 100, 20], atol=1e-4)
    resize.resize_mode = caffe_pb2.ResizeParameter.FIT_SMALL_SIZE
    resize.height_scale, resize.width_scale = 200, 400
    np.testing.assert_allclose(output_box([0.1, 0.1, 0.9, 0.9], 100, 200, resize),
                               [40, 20, 200, 100], atol=1e-4)


@pytest.mark.parametrize("output_format, extra, words", [
    ("PASCAL", "", 'output_format must be "VOC", "COCO" or "ILSVRC"'),
    ("VOC", "num_test_image: 3", "num_test_image (3) must be between 1 and the 2 images"),
    ("VOC", "resize_param { height: 0 width: 300 }", "resize_param needs a height"),
])
def test_bad_save_output_params(tmp_path, output_format, extra, words):
    with pytest.raises(CaffeError) as error:
        run_saving(save_param(tmp_path, output_format, extra))
    assert words in str(error.value) and "save_output_param" in str(error.value)


def test_a_label_outside_the_label_map_is_an_error(tmp_path):
    text = save_param(tmp_path, "VOC")
    (tmp_path / "labels.prototxt").write_text('item { name: "background" label: 0 }')
    with pytest.raises(CaffeError, match="cannot find label 1 in the label map"):
        run_saving(text)


def test_the_label_map_is_read_even_without_output_directory(tmp_path):
    text = param(extra=f'save_output_param {{ label_map_file: "{tmp_path / "none"}" }}')
    with pytest.raises(CaffeError, match="none"):
        run_saving(text)
    (tmp_path / "labels.prototxt").write_text(LABEL_MAP)
    run_saving(param(extra=f'save_output_param {{ label_map_file: '
                           f'"{tmp_path / "labels.prototxt"}" }}'))  # nothing to write
