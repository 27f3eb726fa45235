"""A real client of BVLC's Python interface, run unchanged, gives BVLC Caffe's numbers.

The expected values were computed by BVLC Caffe 1.0 itself (Debian bullseye's python3-caffe,
with scikit-image 0.18) running this same client on the same files (client_net.py makes them
from formulas, so both sides read byte-identical inputs). The outputs must agree to 1e-5 of
their scale (they agree to about 5e-7: float32 sums in another order).
"""
import numpy as np
import pytest

from caffe import Net
from caffe.io import Transformer, load_image
from tests.caffe_api.client_net import write_client_files

BVLC_PROB = [
    [0.12275970727205276, 0.08688812702894211, 0.16380110383033752, 0.3416915535926819,
     0.28485947847366333],
    [0.3865339756011963, 0.36650222539901733, 0.10433341562747955, 0.047117866575717926,
     0.09551254659891129],
    [0.003446037881076336, 0.00499139167368412, 0.13321146368980408, 0.7699772715568542,
     0.08837380260229111]]
BVLC_IP = [
    [-0.3581319749355316, -0.7037392854690552, -0.06970782577991486, 0.6655476689338684,
     0.483635276556015],
    [0.9721235632896423, 0.918908417224884, -0.33750444650650024, -1.1324440240859985,
     -0.42583853006362915],
    [-2.5119705200195312, -2.1414811611175537, 1.1427419185638428, 2.897165060043335,
     0.7323796153068542]]
BVLC_BATCH_SUM, BVLC_BATCH_ABS_SUM = 28184.869354248047, 148704.06340026855


def run_client(deploy, weights, image):
    """The client as a Caffe user writes it (three images, so forward_all pads a batch)."""
    net = Net(deploy, 1, weights=weights)
    t = Transformer({net.inputs[0]: net.blobs[net.inputs[0]].data.shape})
    t.set_transpose(net.inputs[0], (2, 0, 1))
    t.set_channel_swap(net.inputs[0], (2, 1, 0))
    t.set_raw_scale(net.inputs[0], 255)
    t.set_mean(net.inputs[0], np.array([104., 117., 123.]))
    img = load_image(image)
    batch = np.stack([t.preprocess(net.inputs[0], img), t.preprocess(net.inputs[0], img[::-1]),
                      t.preprocess(net.inputs[0], img[:, ::-1])])
    return batch, net.forward_all(blobs=["prob", "ip"], **{net.inputs[0]: batch})


def test_client_gives_bvlc_caffes_numbers(tmp_path):
    batch, out = run_client(*write_client_files(str(tmp_path)))
    assert batch.shape == (3, 3, 16, 16)
    assert batch.astype(np.float64).sum() == pytest.approx(BVLC_BATCH_SUM, rel=1e-6)
    assert np.abs(batch).astype(np.float64).sum() == pytest.approx(BVLC_BATCH_ABS_SUM, rel=1e-6)
    for name, expected in (("ip", BVLC_IP), ("prob", BVLC_PROB)):
        expected = np.array(expected)
        assert out[name].shape == expected.shape
        np.testing.assert_allclose(out[name], expected, rtol=0,
                                   atol=1e-5 * np.abs(expected).max())
    assert out["prob"].argmax(axis=1).tolist() == [3, 0, 3]   # as BVLC's
