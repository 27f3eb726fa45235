"""MultiBoxLoss (SSD's fork): loss and gradients against a loop reference written from the
fork's multibox_loss_layer.cpp and bbox_util.cpp, finite differences, the GPU path (through
the host) and the user errors."""
import math

import numpy as np
import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.testing import check_gradient
from tests.detection.test_matching import reference_match
from tests.gpu_helpers import compare_layer_modes
from tests.layer_helpers import set_up

_CENTRES = np.linspace(0.15, 0.85, 4)
_GRID = [[x - 0.16, y - 0.14, x + 0.16, y + 0.14] for y in _CENTRES for x in _CENTRES]
PRIORS = np.array([
    [0.05, 0.05, 0.45, 0.45], [0.1, 0.1, 0.5, 0.55], [0.5, 0.5, 0.95, 0.95],
    [0.45, 0.4, 0.9, 0.9], [0.0, 0.5, 0.4, 1.0], [0.6, 0.0, 1.0, 0.4],
    [0.3, 0.3, 0.7, 0.7], [0.2, 0.0, 0.6, 0.35]] + _GRID, np.float32)
N, P, C = 2, len(PRIORS), 3
VARIANCES = np.tile(np.float32([0.1, 0.1, 0.2, 0.2]), (P, 1))
PRIOR_BLOB = np.concatenate([PRIORS.ravel(), VARIANCES.ravel()]).reshape(1, 2, 4 * P)
# image 0: labels 1 and 2; image 1: label 1, and a difficult label 2
LABEL_BLOB = np.array([
    [0, 1, 0, 0.08, 0.1, 0.46, 0.5, 0],
    [0, 2, 1, 0.5, 0.45, 0.92, 0.93, 0],
    [1, 1, 0, 0.28, 0.32, 0.72, 0.7, 0],
    [1, 2, 1, 0.0, 0.55, 0.42, 0.98, 1],
    [-1, 0, 0, 0, 0, 0, 0, 0]], np.float32).reshape(1, 1, 5, 8)

FLT_MIN = np.finfo(np.float32).tiny


def config(**changes):
    cfg = dict(num_classes=C, share_location=True, match_type=1, overlap_threshold=0.5,
               use_prior_for_matching=True, background_label_id=0, use_difficult_gt=True,
               mining_type=1, neg_pos_ratio=3.0, neg_overlap=0.5, code_type=2,
               encode_variance_in_target=False, map_object_to_agnostic=False,
               loc_loss_type=1, conf_loss_type=0, loc_weight=1.0, sample_size=64,
               normalization=1)
    cfg.update(changes)
    return cfg


NAMES = {"mining_type": ["NONE", "MAX_NEGATIVE", "HARD_EXAMPLE"],
         "match_type": ["BIPARTITE", "PER_PREDICTION"], "code_type": [None, "CORNER",
         "CENTER_SIZE", "CORNER_SIZE"], "loc_loss_type": ["L2", "SMOOTH_L1"],
         "conf_loss_type": ["SOFTMAX", "LOGISTIC"]}
NORMS = ["FULL", "VALID", "BATCH_SIZE", "NONE"]


def prototxt(cfg, extra=""):
    fields = []
    for key, value in cfg.items():
        if key == "normalization":
            continue
        if key in NAMES:
            value = NAMES[key][value]
        elif isinstance(value, bool):
            value = str(value).lower()
        fields.append(f"{key}: {value}")
    return (f'name: "mbox" type: "MultiBoxLoss" multibox_loss_param {{ {" ".join(fields)} }} '
            f"loss_param {{ normalization: {NORMS[cfg['normalization']]} }} {extra}")


def encode(prior, var, code, evit, box):
    prior, box = prior.astype(np.float64), box.astype(np.float64)
    if code == 1:
        e = box - prior
    else:
        pw, ph = prior[2] - prior[0], prior[3] - prior[1]
        if code == 3:
            e = (box - prior) / [pw, ph, pw, ph]
        else:
            bw, bh = box[2] - box[0], box[3] - box[1]
            e = np.array([((box[0] + box[2]) - (prior[0] + prior[2])) / 2 / pw,
                          ((box[1] + box[3]) - (prior[1] + prior[3])) / 2 / ph,
                          math.log(bw / pw), math.log(bh / ph)])
    return e if evit else e / var


def decode(prior, var, code, evit, loc):
    prior = prior.astype(np.float64)
    loc = loc if evit else loc * var
    if code == 1:
        return prior + loc
    pw, ph = prior[2] - prior[0], prior[3] - prior[1]
    if code == 3:
        return prior + loc * [pw, ph, pw, ph]
    cx = loc[0] * pw + (prior[0] + prior[2]) / 2
    cy = loc[1] * ph + (prior[1] + prior[3]) / 2
    w, h = math.exp(loc[2]) * pw, math.exp(loc[3]) * ph
    return np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])


def conf_term(x, label=None, target=None):
    """(loss, gradient) of one prior's scores."""
    x = x.astype(np.float64)
    if target is None:
        p = np.exp(x - x.max())
        p /= p.sum()
        grad = p.copy()
        grad[label] -= 1
        return -math.log(max(p[label], FLT_MIN)), grad
    loss = sum(-(v * (t - (v >= 0)) - math.log(1 + math.exp(v - 2 * v * (v >= 0))))
               for v, t in zip(x, target))
    return loss, 1 / (1 + np.exp(-x)) - target


def loc_term(d, smooth):
    if smooth:
        return (np.where(abs(d) < 1, 0.5 * d * d, abs(d) - 0.5).sum(),
                np.where(abs(d) < 1, d, np.sign(d)))
    return 0.5 * (d * d).sum(), d


def reference(loc, conf, cfg, prior_blob=PRIOR_BLOB, label_blob=LABEL_BLOB):
    """(loss, d loss / d loc, d loss / d conf) as the fork computes them (top diff 1)."""
    num, classes, bg = loc.shape[0], cfg["num_classes"], cfg["background_label_id"]
    share, code, evit = cfg["share_location"], cfg["code_type"], cfg["encode_variance_in_target"]
    priors_n = prior_blob.shape[2] // 4
    priors = prior_blob[0, 0].reshape(-1, 4)
    var = prior_blob[0, 1].reshape(-1, 4).astype(np.float64)
    nloc = 1 if share else classes
    locs = loc.reshape(num, priors_n, nloc, 4).astype(np.float64)
    confs = conf.reshape(num, priors_n, classes)
    gts = {}
    for row in label_blob.reshape(-1, 8):
        if int(row[0]) != -1 and (cfg["use_difficult_gt"] or not row[7]):
            gts.setdefault(int(row[0]), []).append((int(row[1]), row[3:7]))
    matches, overlaps = [], []
    for i in range(num):
        mi, mo = {}, {}
        if i in gts:
            labels, boxes = [g[0] for g in gts[i]], [g[1] for g in gts[i]]
            args = (cfg["match_type"], cfg["overlap_threshold"],
                    cfg.get("ignore_cross_boundary_bbox", False))
            for c in range(nloc):
                key = -1 if share else c
                if not share and c == bg:
                    continue
                if cfg["use_prior_for_matching"]:
                    idx, ov = reference_match(boxes, priors, *args)
                    # share_location keeps -2 (ignored); the classes get -1
                    mi[key] = [g if share or (g > -1 and labels[g] == c) else -1 for g in idx]
                else:
                    sub = [g for g in range(len(boxes)) if share or labels[g] == c]
                    dec = [decode(priors[j], var[j], code, evit, locs[i, j, c])
                           for j in range(priors_n)]
                    idx, ov = reference_match([boxes[g] for g in sub], dec, *args)
                    mi[key] = [sub[g] if g > -1 else g for g in idx]
                mo[key] = ov
        matches.append(mi)
        overlaps.append(mo)

    def positives(i):
        for key in sorted(matches[i]):
            for j, g in enumerate(matches[i][key]):
                if g > -1:
                    yield key, j, g

    def encoded(i, key, j, g):
        pred = locs[i, j, 0 if share else key]
        target = encode(priors[j], var[j], code, evit, gts[i][g][1])
        if cfg.get("bp_inside"):
            box = priors[j] if cfg["use_prior_for_matching"] else decode(
                priors[j], var[j], code, evit, pred)
            pred = np.where((box < 0) | (box > 1), target, pred)
        return (pred / var[j], target / var[j]) if evit else (pred, target)

    mining = cfg["mining_type"]
    negatives = [[] for _ in range(num)]
    if mining:
        for i in gts:
            m, ov = matches[i][-1], overlaps[i][-1]
            loss = []
            for j in range(priors_n):
                label = gts[i][m[j]][0] if m[j] > -1 else bg
                target = None if cfg["conf_loss_type"] == 0 else np.eye(classes + 1)[label][
                    :classes]
                term = conf_term(confs[i, j], label, target)[0]
                if mining == 2 and m[j] > -1:
                    pred, tgt = encoded(i, -1, j, m[j])
                    term += loc_term(pred - tgt, cfg["loc_loss_type"] == 1)[0]
                loss.append(term)
            eligible = [j for j in range(priors_n)
                        if mining == 2 or (m[j] == -1 and ov[j] < cfg["neg_overlap"])]
            if mining == 1:
                num_sel = min(int(np.float32(sum(g > -1 for g in m)) *
                                  np.float32(cfg["neg_pos_ratio"])), len(eligible))
            else:
                num_sel = min(cfg["sample_size"], len(eligible))
            chosen = sorted(eligible, key=lambda j: -loss[j])[:num_sel]
            for j in range(priors_n):
                if m[j] > -1 and mining == 2 and j not in chosen:
                    m[j] = -1
                elif m[j] == -1 and j in chosen:
                    negatives[i].append(j)
    num_matches = sum(1 for i in range(num) for _ in positives(i))
    norm = max(1.0, [num * priors_n, num_matches, num, 1][cfg["normalization"]])
    dloc = np.zeros(locs.shape)
    loc_loss = 0.0
    for i in range(num):
        for key, j, g in positives(i):
            pred, target = encoded(i, key, j, g)
            term, grad = loc_term(pred - target, cfg["loc_loss_type"] == 1)
            loc_loss += term
            dloc[i, j, 0 if share else key] = grad * cfg["loc_weight"] / norm
    logistic = cfg["conf_loss_type"] == 1
    rows = []   # (i, j, label, target)
    for i in range(num):
        if mining:
            if i not in gts:
                continue
            for key, j, g in positives(i):
                label = bg + 1 if cfg["map_object_to_agnostic"] else gts[i][g][0]
                target = np.full(classes, float(bg))
                target[label] = 1
                rows.append((i, j, label, target))
            for j in negatives[i]:
                target = np.full(classes, float(bg))
                if bg < classes:
                    target[bg] = 1
                rows.append((i, j, bg, target))
            continue
        labels = [bg] * priors_n
        targets = np.full((priors_n, classes), float(bg))
        for key, j, g in (positives(i) if i in gts else ()):
            labels[j] = bg + 1 if cfg["map_object_to_agnostic"] else gts[i][g][0]
            targets[j, labels[j]] = 1
        rows += [(i, j, labels[j], targets[j]) for j in range(priors_n)]
    dconf = np.zeros(confs.shape)
    conf_loss = 0.0
    for i, j, label, target in rows:
        term, grad = conf_term(confs[i, j], label, target if logistic else None)
        conf_loss += term
        dconf[i, j] = grad / norm
    loss = cfg["loc_weight"] * loc_loss / norm + conf_loss / norm
    return loss, dloc.reshape(loc.shape), dconf.reshape(conf.shape), num_matches


def inputs(cfg, seed=0, num=N):
    rng = np.random.default_rng(seed)
    nloc = 1 if cfg["share_location"] else cfg["num_classes"]
    loc = rng.normal(scale=0.3, size=(num, P * nloc * 4)).astype(np.float32)
    conf = rng.normal(scale=1.5, size=(num, P * cfg["num_classes"])).astype(np.float32)
    return loc, conf


def run(cfg, loc, conf, label_blob=LABEL_BLOB, extra=""):
    layer, bottom, top = set_up(prototxt(cfg, extra), [loc, conf, PRIOR_BLOB, label_blob])
    loss = layer.forward(bottom, top)
    top[0].diff[...] = 1
    layer.backward(top, [True, True, False, False], bottom)
    return layer, bottom, top, loss


CASES = [
    config(),
    config(mining_type=0),
    config(mining_type=2, sample_size=5),
    config(mining_type=2, sample_size=20, loc_loss_type=0),
    config(match_type=0),
    config(conf_loss_type=1),
    config(conf_loss_type=1, mining_type=0),
    config(loc_loss_type=0, loc_weight=2.5),
    config(normalization=0), config(normalization=2), config(normalization=3),
    config(share_location=False, mining_type=0),
    config(share_location=False, mining_type=0, use_prior_for_matching=False),
    config(use_prior_for_matching=False, overlap_threshold=0.3),
    config(code_type=1, use_difficult_gt=False, neg_pos_ratio=1.5),
    config(code_type=3, neg_overlap=0.3),
    config(encode_variance_in_target=True),
    config(ignore_cross_boundary_bbox=True),
    config(ignore_cross_boundary_bbox=True, mining_type=2, sample_size=7),
    config(bp_inside=True), config(bp_inside=True, use_prior_for_matching=False),
    config(num_classes=2, map_object_to_agnostic=True, mining_type=0),
    config(num_classes=2, map_object_to_agnostic=True),
]


def relabelled(cfg):
    """LABEL_BLOB with labels that fit ``cfg`` (2 classes: every object is class 1)."""
    blob = LABEL_BLOB.copy()
    if cfg["num_classes"] == 2:
        blob[0, 0, :4, 1] = 1
    return blob


@pytest.mark.parametrize("cfg", CASES)
def test_forward_and_backward_against_reference(cfg):
    loc, conf = inputs(cfg)
    label_blob = relabelled(cfg)
    layer, bottom, top, loss = run(cfg, loc, conf, label_blob)
    want, dloc, dconf, num_matches = reference(loc, conf, cfg, label_blob=label_blob)
    assert layer.num_matches == num_matches and num_matches > 0
    np.testing.assert_allclose(top[0].data, want, rtol=2e-5)
    np.testing.assert_allclose(loss, want, rtol=2e-5)
    np.testing.assert_allclose(bottom[0].diff, dloc, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(bottom[1].diff, dconf, rtol=1e-4, atol=1e-6)


def test_images_without_ground_truth_give_no_mined_negatives():
    cfg = config()
    loc, conf = inputs(cfg, 3, num=3)
    _, bottom, top, _ = run(cfg, loc, conf)
    want, _, dconf, _ = reference(loc, conf, cfg)
    np.testing.assert_allclose(top[0].data, want, rtol=2e-5)
    assert not bottom[1].diff[2].any() and not bottom[0].diff[2].any()
    cfg = config(mining_type=0)    # without mining image 2 is all background
    _, bottom, top, _ = run(cfg, loc, conf)
    np.testing.assert_allclose(top[0].data, reference(loc, conf, cfg)[0], rtol=2e-5)
    assert bottom[1].diff[2].any()


def test_top_diff_scales_the_gradients():
    cfg = config()
    loc, conf = inputs(cfg, 1)
    layer, bottom, top, _ = run(cfg, loc, conf)
    dloc, dconf = bottom[0].diff.copy(), bottom[1].diff.copy()
    top[0].diff[...] = 0.25
    layer.backward(top, [True, True, False, False], bottom)
    np.testing.assert_allclose(bottom[0].diff, dloc * 0.25, rtol=1e-6)
    np.testing.assert_allclose(bottom[1].diff, dconf * 0.25, rtol=1e-6)


def test_propagate_down_false_leaves_the_term_out_of_the_loss():
    cfg = config()
    loc, conf = inputs(cfg, 2)
    full = run(cfg, loc, conf)[3]
    conf_only = run(cfg, loc, conf, extra="propagate_down: false propagate_down: true "
                    "propagate_down: false propagate_down: false")[3]
    no_loc = config(loc_weight=0.0)
    np.testing.assert_allclose(conf_only, reference(loc, conf, no_loc)[0], rtol=2e-5)
    assert conf_only < full


def test_nms_param_without_top_k_mines_nothing():
    """The fork's top_k defaults to 0, which ApplyNMS reads as 'keep none'."""
    cfg = config()
    loc, conf = inputs(cfg, 4)
    plain = run(cfg, loc, conf)[0]
    layer, bottom, top = set_up(prototxt(cfg).replace(
        "sample_size: 64", "sample_size: 64 nms_param { nms_threshold: 0.45 }"),
        [loc, conf, PRIOR_BLOB, LABEL_BLOB])
    layer.forward(bottom, top)
    no_negatives = reference(loc, conf, config(neg_pos_ratio=0.0))[0]
    np.testing.assert_allclose(top[0].data, no_negatives, rtol=2e-5)
    assert plain.num_matches == layer.num_matches


@pytest.mark.parametrize("cfg, seed", [
    (config(), 5), (config(mining_type=0, conf_loss_type=1), 6),
    (config(mining_type=2, sample_size=6, loc_loss_type=0), 7),
    (config(share_location=False, mining_type=0, normalization=2), 8)])
def test_gradient(cfg, seed):
    """Background scores far apart keep the mined priors the same under the steps."""
    loc, conf = inputs(cfg, seed)
    rng = np.random.default_rng(seed)
    conf = conf.reshape(N, P, cfg["num_classes"]) * np.float32(0.3)
    conf[..., 0] = rng.permutation(np.linspace(-2, 2, N * P)).reshape(N, P)
    layer, bottom, top = set_up(prototxt(cfg), [loc, conf, PRIOR_BLOB, LABEL_BLOB])
    check_gradient(layer, bottom, top, check_bottom=[0, 1], stepsize=1e-2, threshold=1e-2)


def test_gpu_mode_runs_through_the_host():
    cfg = config()
    loc, conf = inputs(cfg, 9)
    compare_layer_modes(prototxt(cfg), [loc, conf, PRIOR_BLOB, LABEL_BLOB],
                        top_diffs=[np.float32(1)], propagate_down=[True, True, False, False],
                        check_device_tops=False, rtol=0, atol=0)


@pytest.mark.parametrize("cfg, extra, words", [
    (config(num_classes=0), "", "num_classes"),
    (config(share_location=False), "", "share_location"),
    (config(background_label_id=3), "", "background_label_id"),
    (config(mining_type=2, sample_size=0), "", "sample_size"),
    (config(map_object_to_agnostic=True), "", "map_object_to_agnostic"),
    (config(), "multibox_loss_param { do_neg_mining: false }", "do_neg_mining"),
])
def test_setup_errors(cfg, extra, words):
    text = prototxt(cfg)
    if extra:
        text = text.replace("multibox_loss_param { ", "multibox_loss_param { do_neg_mining: "
                            "false ")
    loc, conf = inputs(config())
    with pytest.raises(CaffeError, match=words):
        set_up(text, [loc, conf, PRIOR_BLOB, LABEL_BLOB])


def test_missing_num_classes_and_bad_shapes():
    loc, conf = inputs(config())
    with pytest.raises(CaffeError, match="num_classes must be set"):
        set_up('name: "m" type: "MultiBoxLoss"', [loc, conf, PRIOR_BLOB, LABEL_BLOB])
    with pytest.raises(CaffeError, match="location predictions"):
        set_up(prototxt(config()), [loc[:, :-4], conf, PRIOR_BLOB, LABEL_BLOB])
    with pytest.raises(CaffeError, match="confidence predictions"):
        set_up(prototxt(config()), [loc, conf[:, :-1], PRIOR_BLOB, LABEL_BLOB])
    with pytest.raises(CaffeError, match="prior bottom"):
        set_up(prototxt(config()), [loc, conf, PRIOR_BLOB[:, :1], LABEL_BLOB])
    with pytest.raises(CaffeError, match="rows of 8"):
        set_up(prototxt(config()), [loc, conf, PRIOR_BLOB, LABEL_BLOB[..., :7]])


@pytest.mark.parametrize("change, words", [
    ((0, 1, 0), "background label 0"),
    ((0, 1, 7), "label 7 is out of range"),
])
def test_forward_errors(change, words):
    label_blob = LABEL_BLOB.copy()
    row, column, value = change
    label_blob[0, 0, row, column] = value
    loc, conf = inputs(config())
    layer, bottom, top = set_up(prototxt(config()), [loc, conf, PRIOR_BLOB, label_blob])
    with pytest.raises(CaffeError, match=words):
        layer.forward(bottom, top)


def test_cannot_backpropagate_to_priors_or_labels():
    loc, conf = inputs(config())
    layer, bottom, top = set_up(prototxt(config()), [loc, conf, PRIOR_BLOB, LABEL_BLOB])
    layer.forward(bottom, top)
    with pytest.raises(CaffeError, match="prior inputs"):
        layer.backward(top, [True, True, True, False], bottom)
    with pytest.raises(CaffeError, match="label inputs"):
        layer.backward(top, [True, True, False, True], bottom)
    assert [layer.allow_force_backward(i) for i in range(4)] == [True, True, False, False]


@pytest.mark.parametrize("mining", [0, 1])
def test_a_batch_without_ground_truth(mining):
    cfg = config(mining_type=mining)
    loc, conf = inputs(cfg, 10)
    empty = np.full((1, 1, 1, 8), -1, np.float32)
    layer, bottom, top, loss = run(cfg, loc, conf, empty)
    want, _, dconf, _ = reference(loc, conf, cfg, label_blob=empty)
    assert layer.num_matches == 0 and not bottom[0].diff.any()
    np.testing.assert_allclose(loss, want, rtol=2e-5)
    np.testing.assert_allclose(bottom[1].diff, dconf, rtol=1e-4, atol=1e-6)
    assert (loss == 0) == (mining == 1)


def test_legacy_normalize_and_pre_fixed():
    cfg = config(normalization=2)
    loc, conf = inputs(cfg, 11)
    text = prototxt(cfg).replace("normalization: BATCH_SIZE", "normalize: false")
    layer, bottom, top = set_up(text, [loc, conf, PRIOR_BLOB, LABEL_BLOB])
    np.testing.assert_allclose(layer.forward(bottom, top), reference(loc, conf, cfg)[0],
                               rtol=2e-5)
    with pytest.raises(CaffeError, match="PRE_FIXED"):
        set_up(prototxt(cfg).replace("BATCH_SIZE", "PRE_FIXED"),
               [loc, conf, PRIOR_BLOB, LABEL_BLOB])
