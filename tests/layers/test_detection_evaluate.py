"""DetectionEvaluate (SSD's fork): the fork's test cases, a plain-numpy reference on random
detections, pixel boxes from a name_size_file, and the user errors."""
import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from tests.layer_helpers import blob_of, set_up

# the fork's test data (src/caffe/test/test_detection_evaluate_layer.cpp)
GT = [[0, 1, 0, 0.1, 0.1, 0.3, 0.3, 0],
      [0, 1, 0, 0.6, 0.6, 0.8, 0.8, 1],
      [1, 2, 0, 0.3, 0.3, 0.6, 0.5, 0],
      [1, 1, 0, 0.7, 0.1, 0.9, 0.3, 0]]
DETECTIONS = [[0, 1, 0.3, 0.1, 0.0, 0.4, 0.3],
              [0, 1, 0.7, 0.0, 0.1, 0.2, 0.3],
              [0, 1, 0.9, 0.7, 0.6, 0.8, 0.8],
              [1, 2, 0.8, 0.2, 0.1, 0.4, 0.4],
              [1, 2, 0.1, 0.4, 0.3, 0.7, 0.5],
              [1, 1, 0.2, 0.8, 0.1, 1.0, 0.3],
              [1, 3, 0.2, 0.8, 0.1, 1.0, 0.3],
              [2, 1, 0.2, 0.8, 0.1, 1.0, 0.3]]


def text(num_classes=3, extra=""):
    return (f'name: "eval" type: "DetectionEvaluate" detection_evaluate_param {{ '
            f'num_classes: {num_classes} background_label_id: 0 overlap_threshold: 0.3 '
            f'{extra} }}')


def evaluate(detections, gt, param_text=None):
    det = np.asarray(detections, np.float32).reshape(1, 1, -1, 7)
    truth = np.asarray(gt, np.float32).reshape(1, 1, -1, 8)
    layer, bottom, top = set_up(param_text or text(), [det, truth])
    layer.forward(bottom, top)
    return layer, top[0].data.reshape(-1, 5).copy()


def test_setup_shape():
    _, rows = evaluate(DETECTIONS, GT)
    assert rows.shape == (8 + 2, 5)


@pytest.mark.parametrize("difficult, expected", [
    ("", [[-1, 1, 3, -1, -1], [-1, 2, 1, -1, -1], [0, 1, 0.9, 1, 0], [0, 1, 0.7, 1, 0],
          [0, 1, 0.3, 0, 1], [1, 1, 0.2, 1, 0], [1, 2, 0.8, 0, 1], [1, 2, 0.1, 1, 0],
          [1, 3, 0.2, 0, 1], [2, 1, 0.2, 0, 1]]),
    # the 0.9 detection matches a difficult box: neither a true nor a false positive
    ("evaluate_difficult_gt: false",
     [[-1, 1, 2, -1, -1], [-1, 2, 1, -1, -1], [0, 1, 0.9, 0, 0], [0, 1, 0.7, 1, 0],
      [0, 1, 0.3, 0, 1], [1, 1, 0.2, 1, 0], [1, 2, 0.8, 0, 1], [1, 2, 0.1, 1, 0],
      [1, 3, 0.2, 0, 1], [2, 1, 0.2, 0, 1]]),
])
def test_forks_forward_cases(engine, difficult, expected):
    _, rows = evaluate(DETECTIONS, GT, text(extra=difficult))
    np.testing.assert_allclose(rows, np.asarray(expected, np.float32), rtol=0, atol=1e-6)


def reference(detections, gt, num_classes, threshold):
    """Plain loops over images and labels; normalized IoU."""
    def iou(a, b):
        iw = min(a[2], b[2]) - max(a[0], b[0])
        ih = min(a[3], b[3]) - max(a[1], b[1])
        if iw <= 0 or ih <= 0:
            return 0.0
        inter = iw * ih
        return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)
    rows = [[-1, c, sum(1 for g in gt if g[1] == c), -1, -1] for c in range(1, num_classes)]
    for item in sorted({int(d[0]) for d in detections}):
        for label in sorted({int(d[1]) for d in detections if d[0] == item}):
            dets = sorted((d for d in detections if d[0] == item and d[1] == label),
                          key=lambda d: -d[2])
            boxes = [g[3:7] for g in gt if g[0] == item and g[1] == label]
            used = [False] * len(boxes)
            for d in dets:
                overlaps = [iou(d[3:7], b) for b in boxes]
                if overlaps and max(overlaps) >= threshold:
                    j = overlaps.index(max(overlaps))
                    rows.append([item, label, d[2], 0 if used[j] else 1, 1 if used[j] else 0])
                    used[j] = True
                else:
                    rows.append([item, label, d[2], 0, 1])
    return np.asarray(rows, np.float32)


def random_boxes(rng, n):
    corners = rng.uniform(0, 0.7, (n, 2))
    sizes = rng.uniform(0.05, 0.3, (n, 2))
    return np.concatenate([corners, corners + sizes], axis=1)


def test_matches_a_numpy_reference_on_random_detections():
    rng = np.random.default_rng(3)
    gt_boxes = random_boxes(rng, 12)
    gt = np.zeros((12, 8))
    gt[:, 0] = np.sort(rng.integers(0, 3, 12))
    gt[:, 1] = rng.integers(1, 4, 12)
    gt[:, 3:7] = gt_boxes
    # detections: jittered copies of the truth (some hits, some duplicates) plus noise
    picks = rng.integers(0, 12, 30)
    det = np.zeros((40, 7))
    det[:30, 0], det[:30, 1] = gt[picks, 0], gt[picks, 1]
    det[:30, 3:7] = gt_boxes[picks] + rng.normal(0, 0.03, (30, 4))
    det[30:, 0], det[30:, 1] = rng.integers(0, 4, 10), rng.integers(1, 4, 10)
    det[30:, 3:7] = random_boxes(rng, 10)
    det[:, 2] = rng.permutation(np.linspace(0.05, 0.95, 40))
    det = det.astype(np.float32)
    _, rows = evaluate(det, gt, text(num_classes=4, extra="").replace("0.3", "0.5"))
    expected = reference(det.tolist(), gt.astype(np.float32).tolist(), 4, 0.5)
    assert 0 < expected[3:, 3].sum() < 40   # both kinds occur
    np.testing.assert_allclose(rows, expected, rtol=0, atol=1e-6)


def test_skipped_rows_stay_zero_and_ground_truth_stops_at_minus_one():
    det = [[-1, 0, 0, 0, 0, 0, 0], [0, 1, 0.5, 0.1, 0.1, 0.3, 0.3]]
    gt = [[0, 1, 0, 0.1, 0.1, 0.3, 0.3, 0], [-1, 0, 0, 0, 0, 0, 0, 0],
          [0, 2, 0, 0.1, 0.1, 0.3, 0.3, 0]]
    _, rows = evaluate(det, gt)
    np.testing.assert_allclose(rows, [[-1, 1, 1, -1, -1], [-1, 2, 0, -1, -1],
                                      [0, 1, 0.5, 1, 0], [0, 0, 0, 0, 0]], atol=1e-6)


def test_name_size_file_scales_boxes_to_pixels(tmp_path):
    """Image 0 is 10 x 10 pixels: boxes (1,1,3,3) and (2,2,4,4), 3 x 3 pixels each, share
    2 x 2 pixels: IoU 4 / (9 + 9 - 4) = 0.286 >= 0.25, where normalized IoU is 1/7 < 0.25.
    Image 1 is 100 x 100: (10,10,30,30) and (20,20,40,40): 121 / (441 + 441 - 121) = 0.159."""
    sizes = tmp_path / "sizes.txt"
    sizes.write_text("a 10 10\nb 100 100\n")
    det = [[0, 1, 0.9, 0.2, 0.2, 0.4, 0.4], [1, 1, 0.9, 0.2, 0.2, 0.4, 0.4]]
    gt = [[0, 1, 0, 0.1, 0.1, 0.3, 0.3, 0], [1, 1, 0, 0.1, 0.1, 0.3, 0.3, 0]]
    extra = f'name_size_file: "{sizes}"'
    layer, rows = evaluate(det, gt, text(extra=extra).replace("0.3 ", "0.25 "))
    np.testing.assert_allclose(rows[2:, 3:], [[1, 0], [0, 1]])
    assert layer.count == 0   # two images with detections: wrapped round the file
    _, normalized = evaluate(det, gt, text().replace("0.3 ", "0.25 "))
    np.testing.assert_allclose(normalized[2:, 3:], [[0, 1], [0, 1]])


def test_resize_fit_large_size_and_pad_maps_boxes_back(tmp_path):
    """A 10 x 20 (h x w) image padded into a square: the content spans y in [0.25, 0.75];
    the detection (0, 0.25, 0.5, 0.75) is the left half of the image, as the truth."""
    from pycaffe_cli.layers.detection_evaluate import output_boxes
    from pycaffe_cli.proto import caffe_pb2
    resize = caffe_pb2.ResizeParameter(resize_mode=caffe_pb2.ResizeParameter.
                                       FIT_LARGE_SIZE_AND_PAD, height=100, width=100)
    boxes, sizes = output_boxes([[0, 0.25, 0.5, 0.75]], 10, 20, resize)
    np.testing.assert_allclose(boxes, [[0, 0, 10, 10]], atol=1e-5)
    np.testing.assert_allclose(sizes, [121], atol=1e-3)


@pytest.mark.parametrize("det, gt, param, words", [
    ([[0, 0, 0.5, 0, 0, 1, 1]], [[0, 1, 0, 0, 0, 1, 1, 0]], None, "background label"),
    ([[0, 1, 0.5, 0, 0, 1, 1]], [[0, 0, 0, 0, 0, 1, 1, 0]], None, "background label"),
    ([[0, 1, 0.5, 0, 0, 1, 1]], [[0, 1, 0, 0, 0, 1, 1, 0]],
     'name: "e" type: "DetectionEvaluate" detection_evaluate_param { }', "num_classes"),
    ([[0, 1, 0.5, 0, 0, 1, 1]], [[0, 1, 0, 0, 0, 1, 1, 0]],
     'name: "e" type: "DetectionEvaluate" detection_evaluate_param { num_classes: 2 '
     'overlap_threshold: 0 }', "overlap_threshold"),
])
def test_user_errors_name_the_layer(det, gt, param, words):
    with pytest.raises(CaffeError, match=words) as error:
        evaluate(det, gt, param)
    assert '"e' in str(error.value) or "eval" in str(error.value)


def test_bottom_shapes_are_checked():
    with pytest.raises(CaffeError, match="1 x 1 x n x 7"):
        set_up(text(), [np.zeros((1, 1, 2, 6)), np.zeros((1, 1, 1, 8))])
    with pytest.raises(CaffeError, match="1 x 1 x n x 8"):
        set_up(text(), [np.zeros((1, 1, 2, 7)), blob_of(np.zeros((2, 1, 1, 8)))])
