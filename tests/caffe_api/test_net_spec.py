"""caffe.net_spec: nets written as Python expressions, serialised as BVLC writes them."""
import re
import textwrap

import pytest
from google.protobuf import text_format

import caffe
from caffe import net_spec
from caffe.net_spec import NetSpec, layers as L, params as P
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2


def lenet(batch_size):
    """LeNet with every top named through a NetSpec."""
    n = NetSpec()
    n.data, n.label = L.DummyData(shape=[dict(dim=[batch_size, 1, 28, 28]),
                                         dict(dim=[batch_size, 1, 1, 1])],
                                  transform_param=dict(scale=1. / 255), ntop=2)
    n.conv1 = L.Convolution(n.data, kernel_size=5, num_output=20,
                            weight_filler=dict(type='xavier'))
    n.pool1 = L.Pooling(n.conv1, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.conv2 = L.Convolution(n.pool1, kernel_size=5, num_output=50,
                            weight_filler=dict(type='xavier'))
    n.pool2 = L.Pooling(n.conv2, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.ip1 = L.InnerProduct(n.pool2, num_output=500, weight_filler=dict(type='xavier'))
    n.relu1 = L.ReLU(n.ip1, in_place=True)
    n.ip2 = L.InnerProduct(n.relu1, num_output=10, weight_filler=dict(type='xavier'))
    n.loss = L.SoftmaxWithLoss(n.ip2, n.label)
    return n.to_proto()


def anon_lenet(batch_size):
    """The same net written without names: every name is automatic."""
    data, label = L.DummyData(shape=[dict(dim=[batch_size, 1, 28, 28]),
                                     dict(dim=[batch_size, 1, 1, 1])],
                              transform_param=dict(scale=1. / 255), ntop=2)
    conv1 = L.Convolution(data, kernel_size=5, num_output=20, weight_filler=dict(type='xavier'))
    pool1 = L.Pooling(conv1, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    conv2 = L.Convolution(pool1, kernel_size=5, num_output=50,
                          weight_filler=dict(type='xavier'))
    pool2 = L.Pooling(conv2, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    ip1 = L.InnerProduct(pool2, num_output=500, weight_filler=dict(type='xavier'))
    relu1 = L.ReLU(ip1, in_place=True)
    ip2 = L.InnerProduct(relu1, num_output=10, weight_filler=dict(type='xavier'))
    return L.SoftmaxWithLoss(ip2, label).to_proto()


def silent_net():
    n = NetSpec()
    n.data, n.data2 = L.DummyData(shape=dict(dim=3), ntop=2)
    n.silence_data = L.Silence(n.data, ntop=0)
    n.silence_data2 = L.Silence(n.data2, ntop=0)
    return n.to_proto()


def build(tmp_path, proto):
    """Write the spec's text to a file and build it in TEST phase with the engine."""
    path = tmp_path / "net.prototxt"
    path.write_text(str(proto))
    return Net.from_file(str(path), caffe_pb2.TEST)


# --- whole nets --------------------------------------------------------------------------
def test_named_lenet_text_and_names():
    proto = lenet(50)
    assert [layer.name for layer in proto.layer] == [
        'data', 'conv1', 'pool1', 'conv2', 'pool2', 'ip1', 'relu1', 'ip2', 'loss']
    relu = proto.layer[6]
    assert list(relu.bottom) == list(relu.top) == ['ip1']
    assert list(proto.layer[7].bottom) == ['ip1']
    assert list(proto.layer[0].top) == ['data', 'label']
    assert str(proto.layer[2]) == textwrap.dedent('''\
        name: "pool1"
        type: "Pooling"
        bottom: "conv1"
        top: "pool1"
        pooling_param {
          pool: MAX
          kernel_size: 2
          stride: 2
        }
        ''')
    assert text_format.Parse(str(proto), caffe_pb2.NetParameter()) == proto


def test_anonymous_lenet_counts_names_per_type():
    proto = anon_lenet(50)
    assert [(layer.name, list(layer.top)) for layer in proto.layer] == [
        ('DummyData1', ['DummyData1', 'DummyData2']),
        ('Convolution1', ['Convolution1']), ('Pooling1', ['Pooling1']),
        ('Convolution2', ['Convolution2']), ('Pooling2', ['Pooling2']),
        ('InnerProduct1', ['InnerProduct1']),
        ('ReLU1', ['InnerProduct1']),          # in place: its top keeps the bottom's name
        ('InnerProduct2', ['InnerProduct2']),
        ('SoftmaxWithLoss1', ['SoftmaxWithLoss1'])]
    assert list(proto.layer[8].bottom) == ['InnerProduct2', 'DummyData2']


def test_first_layer_text_matches_caffe():
    expected = textwrap.dedent('''\
        layer {
          name: "DummyData1"
          type: "DummyData"
          top: "DummyData1"
          top: "DummyData2"
          transform_param {
            scale: 0.00392156886
          }
          dummy_data_param {
            shape {
              dim: 2
              dim: 1
              dim: 28
              dim: 28
            }
            shape {
              dim: 2
              dim: 1
              dim: 1
              dim: 1
            }
          }
        }
        ''')
    data = L.DummyData(shape=[dict(dim=[2, 1, 28, 28]), dict(dim=[2, 1, 1, 1])],
                       transform_param=dict(scale=1. / 255), ntop=2)
    assert str(data[0].to_proto()) == expected


def test_lenet_builds_with_the_engine(tmp_path):
    for proto in (lenet(4), anon_lenet(4)):
        net = build(tmp_path, proto)
        assert len(net.layers) == 9
        assert net.has_blob('loss') or net.has_blob('SoftmaxWithLoss1')


def test_zero_tops(tmp_path):
    proto = silent_net()
    assert [layer.name for layer in proto.layer] == ['data', 'silence_data', 'silence_data2']
    assert [len(layer.top) for layer in proto.layer] == [2, 0, 0]
    net = build(tmp_path, proto)
    net.forward()
    assert net.output_blobs == []


@pytest.mark.skipif(not hasattr(caffe, "Net"), reason="caffe.Net is not exported yet")
def test_specs_load_as_caffe_net(tmp_path):
    """BVLC's own checks, through caffe.Net (the lead's module)."""
    path = tmp_path / "lenet.prototxt"
    path.write_text(str(lenet(4)))
    assert len(caffe.Net(str(path), caffe.TEST).layers) == 9
    path.write_text(str(silent_net()))
    assert len(caffe.Net(str(path), caffe.TEST).forward()) == 0


def test_anonymous_top_less_layer_gets_a_counted_name():
    data = L.DummyData(shape=dict(dim=[2, 3]))
    silence = L.Silence(data, ntop=0)
    assert isinstance(silence, net_spec.Function)
    proto = net_spec.to_proto(silence)
    assert [layer.name for layer in proto.layer] == ['DummyData1', 'Silence1']
    assert list(proto.layer[0].dummy_data_param.shape[0].dim) == [2, 3]


def test_multi_top_layer_returns_a_tuple_and_shared_layers_appear_once():
    a, b = L.Slice(L.DummyData(shape=dict(dim=[4, 6])), slice_point=2, ntop=2)
    proto = net_spec.to_proto(L.Eltwise(a, a), b)
    assert [layer.type for layer in proto.layer] == ['DummyData', 'Slice', 'Eltwise']
    assert list(proto.layer[1].slice_param.slice_point) == [2]
    assert list(proto.layer[2].bottom) == ['Slice1', 'Slice1']


def test_type_error_when_an_input_is_not_a_top():
    data = L.DummyData(ntop=2)
    pattern = r"^Silence input 0 is not a Top \(type is <(type|class) 'tuple'>\)$"
    with pytest.raises(TypeError, match=pattern):
        L.Silence(data, ntop=0)
    L.Silence(*data, ntop=0)


# --- where keywords go ----------------------------------------------------------------------
def layer_of(top):
    return top.to_proto().layer[-1]


def test_keywords_go_to_the_type_message_or_the_layer():
    top = L.Convolution(L.DummyData(shape=dict(dim=[1, 1, 5, 5])), num_output=4, kernel_size=3,
                        pad=[1, 2], param=[dict(lr_mult=1), dict(lr_mult=2, decay_mult=0)],
                        loss_weight=0.5, include=dict(phase=caffe.proto.caffe_pb2.TRAIN),
                        exclude=[dict(stage=['a', 'b'])], propagate_down=False)
    layer = layer_of(top)
    conv = layer.convolution_param
    assert (conv.num_output, list(conv.kernel_size), list(conv.pad)) == (4, [3], [1, 2])
    assert [(p.lr_mult, p.decay_mult) for p in layer.param] == [(1, 1), (2, 0)]
    assert list(layer.loss_weight) == [0.5]
    assert [rule.phase for rule in layer.include] == [caffe_pb2.TRAIN]
    assert list(layer.exclude[0].stage) == ['a', 'b']
    assert list(layer.propagate_down) == [False]


def test_keywords_ending_in_param_always_go_to_the_layer():
    top = L.Deconvolution(L.DummyData(shape=dict(dim=[1, 1, 4, 4])),
                          convolution_param=dict(num_output=3, kernel_size=4, stride=2,
                                                 weight_filler=dict(type='bilinear')),
                          transform_param=dict(mirror=True))
    layer = layer_of(top)
    assert layer.convolution_param.weight_filler.type == 'bilinear'
    assert list(layer.convolution_param.stride) == [2]
    assert layer.transform_param.mirror


def test_python_layer_and_enum_params():
    top = L.Python(module='my_layers', layer='Noise', param_str='{"std": 0.1}')
    layer = layer_of(top)
    assert (layer.python_param.module, layer.python_param.layer) == ('my_layers', 'Noise')
    assert P.Pooling.MAX == caffe_pb2.PoolingParameter.MAX == 0
    assert P.Pooling.AVE == 1
    assert P.Eltwise.SUM == caffe_pb2.EltwiseParameter.SUM
    assert P.Data.LMDB == caffe_pb2.DataParameter.LMDB


def test_param_name_dict():
    names = net_spec.param_name_dict()
    assert names['Convolution'] == 'convolution'
    assert names['InnerProduct'] == 'inner_product'
    assert names['DummyData'] == 'dummy_data'
    assert names['HDF5Data'] == 'hdf5_data'
    assert names['TanH'] == 'tanh'
    assert names['Transformation'] == 'transform'
    assert 'Deconvolution' not in names
    fields = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
    assert all(prefix + '_param' in fields for prefix in names.values())
    assert len(names) == sum(name.endswith('_param') for name in fields)


def test_assign_proto_rules():
    shape = caffe_pb2.BlobShape()
    net_spec.assign_proto(shape, 'dim', 7)
    net_spec.assign_proto(shape, 'dim', [8, 9])
    assert list(shape.dim) == [7, 8, 9]
    filler = caffe_pb2.LayerParameter()
    net_spec.assign_proto(filler, 'inner_product_param',
                          dict(num_output=2, weight_filler=dict(type='gaussian', std=0.5)))
    assert filler.inner_product_param.weight_filler.std == 0.5
    net_spec.assign_proto(filler, 'top', [])
    assert list(filler.top) == []


# --- NetSpec as a container -----------------------------------------------------------------
def test_netspec_items_keys_update_and_delete():
    n = NetSpec()
    n['data'] = L.DummyData(shape=dict(dim=[1, 2]))
    n.ip = L.InnerProduct(n['data'], num_output=3)
    assert n.keys() == ['data', 'ip'] and n.vals() == [n.data, n.ip]
    n.update('ip', dict(bias_term=False, num_output=5))
    proto = n.to_proto()
    assert proto.layer[1].inner_product_param.num_output == 5
    assert not proto.layer[1].inner_product_param.bias_term
    del n['ip']
    assert n.keys() == ['data'] and len(n.to_proto().layer) == 1


def test_one_top_under_two_names_takes_the_last():
    n = NetSpec()
    n.first = n.second = L.DummyData(shape=dict(dim=[1]))
    assert list(n.to_proto().layer[0].top) == ['second']


# --- mistakes --------------------------------------------------------------------------------
def test_unknown_keyword_names_the_layer():
    n = NetSpec()
    n.data = L.DummyData(shape=dict(dim=[1, 2]))
    n.fc = L.InnerProduct(n.data, num_outptu=3)
    with pytest.raises(AttributeError, match=r'layer "fc" \(InnerProduct\).*num_outptu'):
        n.to_proto()


def test_wrong_value_type_names_the_layer():
    n = NetSpec()
    n.data = L.DummyData(shape=dict(dim=[1, 2]))
    n.fc = L.InnerProduct(n.data, num_output='three')
    with pytest.raises(TypeError, match=r'layer "fc" \(InnerProduct\): cannot set num_output'):
        n.to_proto()


def test_a_tuple_assigned_to_a_netspec_is_a_type_error():
    n = NetSpec()
    n.both = L.DummyData(shape=dict(dim=[1]), ntop=2)
    with pytest.raises(TypeError, match=r"NetSpec attribute 'both' is a tuple.*unpack"):
        n.to_proto()


def test_missing_names():
    n = NetSpec()
    n.data = L.DummyData(shape=dict(dim=[1]))
    with pytest.raises(AttributeError, match=r"no top named 'label' \(it has: data\)"):
        n.label
    with pytest.raises(KeyError, match='label'):
        n['label']
    assert not hasattr(n, 'label')
    with pytest.raises(AttributeError, match=re.escape("PoolingParameter has no enum value "
                                                       "'MEDIAN'")):
        P.Pooling.MEDIAN
    with pytest.raises(AttributeError, match="no message NopeParameter"):
        P.Nope.X
