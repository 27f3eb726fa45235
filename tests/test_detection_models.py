"""The SSD detectors of models/ (scripts/make_ssd_models.py): what the script writes, that they
run, and that their detections are OpenCV DNN's for the same random weights and image.

OpenCV's DNN module runs these published models (its face detector is one of them); it is the
independent implementation to agree with. Detections are compared as sets: every detection of
one side has one on the other with the same image and label, a score within 1e-5 and box
corners within 1e-4; one whose score lies within that 1e-5 of the confidence threshold may be
kept by one side only.

A detection's score is the softmaxed conf value of its prior, untouched by DetectionOutput, so
two runtimes' scores differ by what their backbones' conf outputs differ: float32 rounding
grown through the net. The backbone outputs (loc, conf, priors) must agree within 1e-4 of
their largest value (pycaffe_cli/inference/accuracy.py's deviation; measured: 2.2e-5 at most),
and the detection sets with a score tolerance of 1e-5, or the conf outputs' measured difference
where a net's rounding exceeds it (the face detector and VGG-SSD300 with random weights: about
2e-5 on some priors). DetectionOutput alone is held to 1e-5 / 1e-4 on OpenCV's very blobs.
"""
import os

import numpy as np
import pytest

from pycaffe_cli.inference.accuracy import NORMAL, deviation, fill_inputs, random_weights
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.io.prototxt import read_net_param
from pycaffe_cli.net import weights as net_weights
from pycaffe_cli.blob import Blob
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2
from tests.scripts.loading import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCORE_TOL = 1e-5
BOX_TOL = 1e-4
FORWARD_BOUND = 1e-4  # deviation of a backbone output from OpenCV's
# name: (classes, confidence threshold)
SSD_MODELS = {"ssd_face_res10": (2, 0.2), "mobilenet_ssd": (21, 0.3),
              "vgg_ssd300": (21, 0.01)}
SLOW = {"vgg_ssd300"}   # 31 GMACs: seconds per forward on a 2-core machine


def model_path(name):
    return os.path.join(ROOT, "models", name, "deploy.prototxt")


def test_the_ssd_models_are_what_the_script_writes(tmp_path):
    script = load_script("make_ssd_models")
    for path in script.write_models(str(tmp_path)):
        name = os.path.basename(os.path.dirname(path))
        with open(path) as made, open(model_path(name)) as kept:
            assert made.read() == kept.read(), f"models/{name}: run scripts/make_ssd_models.py"


def random_ssd(name, tmp_path, seed=0):
    """(net with random weights and a random image in its input, saved .caffemodel path)."""
    rng = np.random.default_rng(seed)
    net = Net(read_net_param(model_path(name)), caffe_pb2.TEST)
    fill_inputs(net, NORMAL, rng)
    random_weights(net, rng)
    weights = str(tmp_path / f"{name}.caffemodel")
    net_weights.save_binaryproto(net, weights)
    return net, weights


def ssd_params(name):
    param = [layer for layer in read_net_param(model_path(name)).layer
             if layer.type == "DetectionOutput"][0].detection_output_param
    return param.confidence_threshold, param.nms_param.nms_threshold


def unmatched(ours, theirs, threshold, score_tol):
    """The rows of ``ours`` with no row of ``theirs`` of the same image and label within the
    tolerances, each row used once; rows whose score is within ``score_tol`` of the
    threshold are not counted."""
    left = [row for row in theirs]
    missing = []
    for row in sorted(ours, key=lambda r: -r[2]):
        for index, other in enumerate(left):
            if (row[0] == other[0] and row[1] == other[1]
                    and abs(row[2] - other[2]) <= score_tol
                    and np.abs(row[3:] - other[3:]).max() <= BOX_TOL):
                del left[index]
                break
        else:
            if abs(row[2] - threshold) > score_tol:
                missing.append(row)
    return missing


HEAD_BLOBS = ("mbox_loc", "mbox_conf_flatten", "mbox_priorbox", "detection_out")
MODEL_PARAMS = [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                for n in sorted(SSD_MODELS)]


@pytest.fixture(scope="module")
def cv2_with_caffe():
    cv2 = pytest.importorskip("cv2")
    if not hasattr(cv2.dnn, "readNetFromCaffe"):
        pytest.skip("this OpenCV has no Caffe importer (OpenCV 5 dropped it)")
    return cv2


def opencv_blobs(cv2, name, weights, image):
    """OpenCV's values of HEAD_BLOBS, detections without the zero rows OpenCV pads its top
    with up to keep_top_k."""
    reference = cv2.dnn.readNetFromCaffe(model_path(name), weights)
    reference.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    reference.setInput(image)
    blobs = dict(zip(HEAD_BLOBS, (np.array(b) for b in reference.forward(list(HEAD_BLOBS)))))
    detections = blobs["detection_out"].reshape(-1, 7)
    blobs["detection_out"] = detections[detections[:, 2] > 0]
    return blobs


@pytest.mark.parametrize("name", MODEL_PARAMS)
def test_ssd_detections_are_opencvs(name, tmp_path, cv2_with_caffe):
    net, weights = random_ssd(name, tmp_path)
    image = net.input_blobs[0].data.copy()
    net.forward()
    theirs = opencv_blobs(cv2_with_caffe, name, weights, image)
    for blob in HEAD_BLOBS[:3]:
        ours = net.blob_by_name(blob).data
        assert deviation(ours.reshape(theirs[blob].shape), theirs[blob]) <= FORWARD_BOUND, blob
    conf_difference = np.abs(net.blob_by_name("mbox_conf_flatten").data
                             - theirs["mbox_conf_flatten"]).max()
    score_tol = max(SCORE_TOL, float(conf_difference))
    ours = net.blob_by_name("detection_out").data.reshape(-1, 7)
    threshold, _ = ssd_params(name)
    classes, _ = SSD_MODELS[name]
    assert len(ours) > 0 and (ours[:, 1] >= 1).all() and (ours[:, 1] < classes).all()
    assert unmatched(ours, theirs["detection_out"], threshold, score_tol) == []
    assert unmatched(theirs["detection_out"], ours, threshold, score_tol) == []


@pytest.mark.parametrize("name", ["ssd_face_res10", "mobilenet_ssd"])
def test_detection_output_on_opencvs_blobs_gives_opencvs_detections(name, tmp_path,
                                                                    cv2_with_caffe):
    net, weights = random_ssd(name, tmp_path)
    theirs = opencv_blobs(cv2_with_caffe, name, weights, net.input_blobs[0].data.copy())
    [param] = [layer for layer in read_net_param(model_path(name)).layer
               if layer.type == "DetectionOutput"]
    layer = create_layer(param)
    bottoms = [Blob() for _ in range(3)]
    for bottom, blob in zip(bottoms, HEAD_BLOBS):
        bottom.reshape(theirs[blob].shape)
        bottom.data[...] = theirs[blob]
    top = [Blob()]
    layer.setup(bottoms, top)
    layer.forward(bottoms, top)
    ours = top[0].data.reshape(-1, 7)
    threshold, _ = ssd_params(name)
    assert unmatched(ours, theirs["detection_out"], threshold, SCORE_TOL) == []
    assert unmatched(theirs["detection_out"], ours, threshold, SCORE_TOL) == []
