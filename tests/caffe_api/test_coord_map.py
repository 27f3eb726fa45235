"""caffe.coord_map: coordinate maps through conv / pool / deconv / crop, and crop()."""
import numpy as np
import pytest

from caffe import coord_map as cm
from caffe.coord_map import coord_map_from_to, crop
from caffe.net_spec import NetSpec, layers as L, params as P


def conv_pool_deconv(ks=3, stride=1, pad=0, pool=2, dstride=2, dpad=0):
    """data (100x100) -> conv -> max pool -> deconv with kernel 2 x its stride; aux 20x20.

    The deconvolution's keywords go in convolution_param (it has no message of its own), so
    the spec also serialises.
    """
    n = NetSpec()
    n.data = L.Input(shape=dict(dim=[2, 1, 100, 100]))
    n.aux = L.Input(shape=dict(dim=[2, 1, 20, 20]))
    n.conv = L.Convolution(n.data, num_output=10, kernel_size=ks, stride=stride, pad=pad)
    n.pool = L.Pooling(n.conv, pool=P.Pooling.MAX, kernel_size=pool, stride=pool, pad=0)
    deconv_ks = [2 * s for s in dstride] if isinstance(dstride, list) else 2 * dstride
    n.deconv = L.Deconvolution(n.pool, convolution_param=dict(
        num_output=10, kernel_size=deconv_ks, stride=dstride, pad=dpad))
    return n


def scalar_map(mapping):
    ax, a, b = mapping
    return ax, float(np.squeeze(a)), float(np.squeeze(b))


# --- single layers, by hand ---------------------------------------------------------------
def test_layer_maps_by_hand():
    n = conv_pool_deconv(ks=5, stride=2, pad=1)
    # conv: a = 1/2, b = (1 - (5 - 1) / 2) / 2 = -0.5
    assert scalar_map(cm.coord_map(n.conv.fn)) == (1, 0.5, -0.5)
    # pool 2x2 stride 2: a = 1/2, b = (0 - 0.5) / 2
    assert scalar_map(cm.coord_map(n.pool.fn)) == (1, 0.5, -0.25)
    # deconv kernel 4 stride 2: a = 2, b = (4 - 1) / 2 - 0
    assert scalar_map(cm.coord_map(n.deconv.fn)) == (1, 2.0, 1.5)
    assert cm.coord_map(L.ReLU(n.conv).fn) == (None, 1, 0)
    axis, a, b = cm.coord_map(L.Crop(n.deconv, n.data, axis=2, offset=[3, 4]).fn)
    assert axis == 1 and a == 1 and list(b) == [-3, -4]


def test_dilation_and_convolution_param_dict():
    conv = dict(kernel_size=3, dilation=2, pad=2, axis=1)
    fn = L.Convolution(L.Input(), convolution_param=conv).fn
    axis, stride, extent, pad = cm.conv_params(fn)
    assert (axis, list(stride), list(extent), list(pad)) == (1, [1], [5], [2])
    assert scalar_map(cm.coord_map(fn)) == (1, 1.0, 0.0)


def test_crop_params_defaults():
    axis, offset = cm.crop_params(L.Crop(L.Input(), L.Input()).fn)
    assert axis == 2 and list(offset) == [0]


def test_compose_and_inverse():
    assert cm.compose((None, 1, 0), (1, 0.5, -1.0)) == (1, 0.5, -1.0)
    assert cm.compose((2, 2, 3), (None, 1, 0)) == (2, 2, 3)
    # x -> 2x + 3 then y -> 0.5y - 1: scale 1, shift 2 * -1 + 3
    assert cm.compose((1, 2, 3), (1, 0.5, -1)) == (1, 1.0, 1)
    assert cm.inverse((1, 2.0, 3.0)) == (1, 0.5, -1.5)
    with pytest.raises(cm.AxisMismatchException, match="axis 1 and axis 2"):
        cm.compose((1, 1, 0), (2, 1, 0))


def test_undefined_map():
    with pytest.raises(cm.UndefinedMapException, match="InnerProduct"):
        cm.coord_map(L.InnerProduct(L.Input(), num_output=2).fn)


def test_legacy_hw_params_are_refused():
    fn = L.Convolution(L.Input(), kernel_size=3, kernel_h=3, kernel_w=3).fn
    with pytest.raises(AssertionError, match="legacy _h/_w"):
        cm.conv_params(fn)


# --- walking the graph ----------------------------------------------------------------------
def test_conv_pool_deconv():
    # conv 3x3: (1, 1, -1); pool 2: (1, 1/2, -1/4); deconv 4 stride 2: (1, 2, 3/2); walking
    # back from deconv: (2, 3/2) -> (2 * 1/2, 2 * -1/4 + 3/2) = (1, 1) -> (1, -1 + 1) = (1, 0)
    n = conv_pool_deconv()
    assert scalar_map(coord_map_from_to(n.deconv, n.data)) == (1, 1.0, 0.0)
    # pool 4: (1/4, -3/8), deconv 8 stride 4: (4, 7/2) -> (1, 2) -> (1, 1), inverted: b = -1
    n = conv_pool_deconv(pool=4, dstride=4)
    assert scalar_map(coord_map_from_to(n.deconv, n.data)) == (1, 1.0, -1.0)


def test_pass_through_and_1x1_conv_keep_the_map():
    n = conv_pool_deconv()
    reference = coord_map_from_to(n.deconv, n.data)
    n.relu = L.ReLU(n.deconv)
    n.conv1x1 = L.Convolution(n.relu, num_output=10, kernel_size=1, stride=1, pad=0)
    for top in (n.relu, n.conv1x1):
        assert scalar_map(coord_map_from_to(top, n.data)) == scalar_map(reference)


@pytest.mark.parametrize("pad", [1, 4, 10])
def test_padding_shifts(pad):
    n = conv_pool_deconv()
    _, a, b = scalar_map(coord_map_from_to(n.deconv, n.data))
    n = conv_pool_deconv(pad=pad)
    assert scalar_map(coord_map_from_to(n.deconv, n.data))[1:] == (a, b - pad)
    n = conv_pool_deconv(dpad=pad)
    assert scalar_map(coord_map_from_to(n.deconv, n.data))[1:] == (a, b + pad)
    n = conv_pool_deconv(pad=pad, dpad=pad)
    assert scalar_map(coord_map_from_to(n.deconv, n.data))[1:] == (a, b)


def test_multi_bottom_layer_maps_each_bottom_alike():
    n = conv_pool_deconv()
    n.conv_data, n.conv_aux = L.Convolution(n.data, n.aux, ntop=2, num_output=10,
                                            kernel_size=5, stride=2, pad=0)
    assert scalar_map(coord_map_from_to(n.conv_data, n.data)) == \
        scalar_map(coord_map_from_to(n.conv_aux, n.aux)) == (1, 2.0, 2.0)


def test_anisotropic_map_is_its_isotropic_parts():
    n3 = conv_pool_deconv(ks=3, stride=1, pad=0)
    n5 = conv_pool_deconv(ks=5, stride=2, pad=10)
    n35 = conv_pool_deconv(ks=[3, 5], stride=[1, 2], pad=[0, 10])
    ax3, a3, b3 = coord_map_from_to(n3.deconv, n3.data)
    ax5, a5, b5 = coord_map_from_to(n5.deconv, n5.data)
    ax35, a35, b35 = coord_map_from_to(n35.deconv, n35.data)
    assert ax3 == ax5 == ax35 == 1
    assert (a35[0], b35[0]) == (a3[0], b3[0])
    assert (a35[1], b35[1]) == (a5[0], b5[0])


def test_nd_conv():
    n = NetSpec()
    n.data = L.Input(shape=dict(dim=[2, 3, 100, 100, 100]))
    n.conv = L.Convolution(n.data, num_output=10, kernel_size=[3, 3, 3], stride=[1, 1, 1],
                           pad=[0, 1, 2])
    n.pool = L.Pooling(n.conv, pool=P.Pooling.MAX, kernel_size=2, stride=2, pad=0)
    n.deconv = L.Deconvolution(n.pool, num_output=10, kernel_size=4, stride=2, pad=0)
    ax, a, b = coord_map_from_to(n.deconv, n.data)
    assert ax == 1 and len(a) == len(b) == 3
    assert np.all(a == 1)
    np.testing.assert_array_equal(b, [0, -1, -2])


def test_crop_of_crop_adds_its_offset():
    n = conv_pool_deconv()
    _, a, b = scalar_map(coord_map_from_to(n.deconv, n.data))
    n.crop = L.Crop(n.deconv, n.data, axis=2, offset=7)
    assert scalar_map(coord_map_from_to(n.crop, n.data)) == (1, a, b + 7)


def test_crop_helper_writes_the_crop_layer():
    # conv 3x3 pad 1 keeps 100, pool 50, deconv (50 - 1) * 2 + 4 = 102: crop 1 off each side
    n = conv_pool_deconv(pad=1)
    n.crop = crop(n.deconv, n.data)
    layer = n.to_proto().layer[-1]
    assert (layer.type, list(layer.bottom)) == ('Crop', ['deconv', 'data'])
    assert layer.crop_param.axis == 2 and list(layer.crop_param.offset) == [1]
    assert scalar_map(coord_map_from_to(n.crop, n.data)) == (1, 1.0, 0.0)


def test_crop_helper_anisotropic():
    n = conv_pool_deconv(ks=[3, 3], stride=1, pad=[0, 2])  # b = 0 and -2
    n.crop = crop(n.deconv, n.data)
    assert list(n.to_proto().layer[-1].crop_param.offset) == [0, 2]


def test_unconnected_tops():
    n = conv_pool_deconv()
    n.ip = L.InnerProduct(n.deconv, num_output=10)
    with pytest.raises(RuntimeError, match="connected by spatial layers"):
        coord_map_from_to(n.ip, n.data)


def test_scale_mismatch():
    n = conv_pool_deconv(pool=3, dstride=2)
    with pytest.raises(AssertionError, match="scale mismatch"):
        crop(n.deconv, n.data)


def test_negative_crop():
    n = conv_pool_deconv(dpad=10)
    with pytest.raises(AssertionError, match="negative offset"):
        crop(n.deconv, n.data)


def test_fractional_crop():
    n = NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 1, 10, 10]))
    n.conv = L.Convolution(n.data, num_output=1, kernel_size=2, pad=1)  # b = 1 - 1/2
    with pytest.raises(AssertionError, match="noninteger offset"):
        crop(n.conv, n.data)


def test_deconvolution_keywords_need_convolution_param():
    n = NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 1, 4, 4]))
    n.up = L.Deconvolution(n.data, num_output=1, kernel_size=4, stride=2)
    assert scalar_map(coord_map_from_to(n.up, n.data)) == (1, 0.5, -0.75)
    with pytest.raises(AttributeError, match=r'layer "up" \(Deconvolution\): unknown parameter '
                                             r"'num_output'.*convolution_param=dict"):
        n.to_proto()
