"""Impossible sizes, in-place misuse and very large nets.

* Blob shapes are checked before anything is allocated (pycaffe_cli/sizes.py): more values than
  a Caffe blob holds (INT_MAX), or more bytes than the machine has, is a one-line error naming
  the layer; an allocation that fails anyway (MemoryError) names the layer too.
* A layer whose top is its own bottom is refused unless the layer computes the same in place.
* The "Initializing net from parameters" echo is capped for huge nets, which build in time
  linear in their size.
"""
import logging
import time

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_cli import backend, proto_echo, sizes
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import layer_class, registered_types
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST
INT_MAX = 2 ** 31 - 1


def net_param(text):
    return text_format.Parse(text, caffe_pb2.NetParameter())


def input_net(shape, *layers):
    dims = " ".join(f"dim: {d}" for d in shape)
    text = f'layer {{ name: "in" type: "Input" top: "x" input_param {{ shape {{ {dims} }} }} }}\n'
    return net_param(text + "\n".join(layers))


# --- the size check ---------------------------------------------------------------------------
def test_count_is_exact_where_int64_wraps_around():
    shape = (4294967296, 4294967296)   # 2**64 values: an int64 product says 0
    assert int(np.prod(shape, dtype=np.int64)) == 0
    with pytest.raises(sizes.AllocationError, match=r"4294967296 4294967296 needs 64\.0 EiB"):
        sizes.checked_count(shape)


def test_int_max_values_is_the_largest_blob():
    assert sizes.checked_count((INT_MAX,)) == INT_MAX
    message = r"needs 8\.0 GiB \(2147483648 values\), more than the 2147483647 values \(INT_MAX\)"
    with pytest.raises(sizes.AllocationError, match=message):
        Blob((2 ** 16, 2 ** 15))


def test_a_dimension_over_int_max_is_refused_even_with_no_values():
    with pytest.raises(sizes.AllocationError, match="dimension over 2147483647"):
        Blob((0, 2 ** 40))


def test_more_bytes_than_the_machine_has(monkeypatch):
    monkeypatch.setattr(sizes, "physical_memory", lambda: 1 << 30)
    message = r"^a blob of shape 1024 1024 257 needs 1\.0 GiB, more than this machine's 1\.0 GiB"
    with pytest.raises(sizes.AllocationError, match=message):
        sizes.checked_count((1024, 1024, 257))
    assert sizes.checked_count((1024, 1024, 256)) == 1 << 28   # exactly 1 GiB fits


def test_allocation_error_is_a_caffe_error_and_a_memory_error():
    with pytest.raises(MemoryError):
        Blob((INT_MAX, 2))
    with pytest.raises(CaffeError):
        Blob((INT_MAX, 2))


def test_a_refused_reshape_keeps_the_blob_as_it_was():
    blob = Blob((2, 3))
    blob.data[...] = 7
    with pytest.raises(sizes.AllocationError):
        blob.reshape((INT_MAX, INT_MAX))
    assert blob.shape == (2, 3)
    np.testing.assert_array_equal(blob.data, 7)


@pytest.mark.parametrize("count, text", [(5, "0.0 KiB"), (12 << 20, "12.0 MiB"),
                                         (400 * 10 ** 9, "372.5 GiB"), (3 << 50, "3.0 PiB")])
def test_format_bytes(count, text):
    assert sizes.format_bytes(count) == text


# --- the layer is named -----------------------------------------------------------------------
IMPOSSIBLE = {
    "inner_product": ((2, 100), 'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" '
                                "inner_product_param { num_output: 1000000000 } }",
                      'layer "ip": InnerProduct: a blob of shape 1000000000 100 needs 372.5 GiB'),
    "conv_pad": ((1, 1, 4, 4), 'layer { name: "conv" type: "Convolution" bottom: "x" top: "y" '
                               "convolution_param { num_output: 1 kernel_size: 3 "
                               "pad: 2147483648 } }",
                 'layer "conv": Convolution: a blob of shape 1 1 4294967298 4294967298'),
    "tile": ((2, 3), 'layer { name: "tile" type: "Tile" bottom: "x" top: "y" '
                     "tile_param { axis: 1 tiles: 2147483647 } }",
             'layer "tile": Tile: a blob of shape 2 6442450941 needs 48.0 GiB'),
    "deconv_stride": ((1, 1, 3, 3), 'layer { name: "up" type: "Deconvolution" bottom: "x" '
                                    'top: "y" convolution_param { num_output: 1 kernel_size: 1 '
                                    "stride: 4000000000 } }",
                      'layer "up": Deconvolution: a blob of shape 1 1 8000000001 8000000001'),
    "embed": ((2,), 'layer { name: "embed" type: "Embed" bottom: "x" top: "y" '
                    "embed_param { num_output: 100000 input_dim: 100000 } }",
              'layer "embed": Embed: a blob of shape 100000 100000 needs 37.3 GiB'),
    "dummy_data": (None, 'layer { name: "dummy" type: "DummyData" top: "z" dummy_data_param { '
                         "shape { dim: 4294967295 dim: 4294967295 dim: 4294967295 } } }",
                   'layer "dummy": DummyData: a blob of shape 4294967295 4294967295 4294967295'),
}


@pytest.mark.parametrize("case", sorted(IMPOSSIBLE))
def test_impossible_sizes_name_the_layer_before_allocating(case):
    shape, layer, message = IMPOSSIBLE[case]
    param = input_net(shape, layer) if shape else net_param(layer)
    with pytest.raises(sizes.AllocationError) as caught:
        Net(param, TEST)
    assert str(caught.value).startswith(message)
    assert caught.value.layer == message.split('"')[1]


def test_a_negative_dimension_names_the_layer():
    with pytest.raises(CaffeError, match=r'^layer "in": Input: blob shape \(2, -3\) has a '
                                         "negative dimension"):
        Net(input_net((2, -3)), TEST)


def test_memory_error_in_forward_names_the_layer(monkeypatch):
    net = Net(input_net((2, 3), 'layer { name: "r" type: "ReLU" bottom: "x" top: "y" }'), TEST)

    def no_memory(self, bottom, top):
        raise MemoryError("Unable to allocate 1.00 TiB for an array with shape (1,)")
    monkeypatch.setattr(layer_class("ReLU"), "forward_cpu", no_memory)
    with pytest.raises(sizes.AllocationError, match=r'^layer "r": ReLU: out of memory in '
                                                    r"forward \(Unable to allocate 1\.00 TiB"):
        net.forward()


def test_numpy_too_big_value_error_in_backward_names_the_layer(monkeypatch):
    net = Net(input_net((2, 3), 'layer { name: "r" type: "ReLU" bottom: "x" top: "y" }',
                        "force_backward: true"), TEST)

    def too_big(self, top, propagate_down, bottom):
        np.empty(2 ** 63, np.float32)
    monkeypatch.setattr(layer_class("ReLU"), "backward_cpu", too_big)
    net.forward()
    with pytest.raises(sizes.AllocationError, match='^layer "r": ReLU: out of memory in '
                                                    "backward"):
        net.backward()


def test_other_value_errors_pass_unchanged(monkeypatch):
    net = Net(input_net((2, 3), 'layer { name: "r" type: "ReLU" bottom: "x" top: "y" }'), TEST)

    def bug(self, bottom, top):
        raise ValueError("a bug in pycaffe")
    monkeypatch.setattr(layer_class("ReLU"), "forward_cpu", bug)
    with pytest.raises(ValueError, match="^a bug in pycaffe$"):
        net.forward()


VGG16_BLOCKS = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))


def vgg16(batch):
    """VGG-16 (Simonyan & Zisserman, configuration D) with constant fillers, so building it
    costs only the memory of its 138 M weights."""
    layers, bottom = [], "x"
    filler = 'weight_filler { type: "constant" value: 0.01 }'
    for block, (channels, convs) in enumerate(VGG16_BLOCKS, 1):
        for conv in range(1, convs + 1):
            name = f"conv{block}_{conv}"
            layers.append(f'layer {{ name: "{name}" type: "Convolution" bottom: "{bottom}" '
                          f'top: "{name}" convolution_param {{ num_output: {channels} '
                          f"kernel_size: 3 pad: 1 {filler} }} }}")
            layers.append(f'layer {{ name: "relu{block}_{conv}" type: "ReLU" bottom: "{name}" '
                          f'top: "{name}" }}')
            bottom = name
        layers.append(f'layer {{ name: "pool{block}" type: "Pooling" bottom: "{bottom}" '
                      f'top: "pool{block}" pooling_param {{ pool: MAX kernel_size: 2 '
                      "stride: 2 } }")
        bottom = f"pool{block}"
    for name, outputs in (("fc6", 4096), ("fc7", 4096), ("fc8", 1000)):
        layers.append(f'layer {{ name: "{name}" type: "InnerProduct" bottom: "{bottom}" '
                      f'top: "{name}" inner_product_param {{ num_output: {outputs} '
                      f"{filler} }} }}")
        bottom = name
    return input_net((batch, 3, 224, 224), *layers)


def test_vgg16_at_batch_64_is_not_refused():
    net = Net(vgg16(64), TEST)
    assert net.blob_by_name("conv1_1").shape == (64, 64, 224, 224)
    assert net.blob_by_name("fc8").shape == (64, 1000)
    assert sum(blob.count() for blob in net.learnable_params) == 138357544


# --- in place -----------------------------------------------------------------------------------
# Every layer type that may run in place, with parameters and the shapes of its bottoms.
IN_PLACE_OK = {
    "BNLL": ("", [(2, 3, 4)]), "Clip": ("clip_param { min: -0.5 max: 0.5 }", [(2, 3, 4)]),
    "Dropout": ("", [(2, 3, 4)]), "ELU": ("elu_param { alpha: 0.5 }", [(2, 3, 4)]),
    "Exp": ("exp_param { scale: 0.5 }", [(2, 3, 4)]), "Log": ("", [(2, 3, 4)]),
    "Power": ("power_param { power: 2 scale: 0.5 shift: 2 }", [(2, 3, 4)]),
    "PReLU": ('prelu_param { filler { type: "gaussian" } }', [(2, 3, 4)]),
    "ReLU": ("relu_param { negative_slope: 0.1 }", [(2, 3, 4)]), "Sigmoid": ("", [(2, 3, 4)]),
    "Swish": ("", [(2, 3, 4)]), "TanH": ("", [(2, 3, 4)]),
    "Threshold": ("threshold_param { threshold: 0.1 }", [(2, 3, 4)]),
    "BatchNorm": ("", [(2, 3, 4)]),
    "Scale": ('scale_param { bias_term: true filler { type: "gaussian" } '
              'bias_filler { type: "gaussian" } }', [(2, 3, 4)]),
    "Bias": ("", [(2, 3, 4), (3,)]), "MVN": ("", [(2, 3, 4)]),
    "Softmax": ("", [(2, 3, 4)]),
}
NO_BACKWARD = ("Threshold",)


def layer_net(type_name, params, shapes, in_place):
    inputs = "".join(f'top: "b{i}" ' for i in range(len(shapes)))
    dims = "".join("shape { " + " ".join(f"dim: {d}" for d in s) + " } " for s in shapes)
    bottoms = "".join(f'bottom: "b{i}" ' for i in range(len(shapes)))
    top = "b0" if in_place else "out"
    return net_param(f'force_backward: true\nlayer {{ name: "in" type: "Input" {inputs}'
                     f"input_param {{ {dims}}} }}\n"
                     f'layer {{ name: "l" type: "{type_name}" {bottoms}top: "{top}" {params} }}')


def run_net(type_name, params, shapes, in_place):
    """Forward and backward once; return the output, the input gradients, the param diffs."""
    backend.set_random_seed(5)
    net = Net(layer_net(type_name, params, shapes, in_place), TRAIN)
    rng = np.random.default_rng(0)
    for blob in net.input_blobs:
        blob.data[...] = rng.uniform(0.5, 2.0, blob.shape) * rng.choice([-1, 1], blob.shape)
    if type_name == "Log":
        net.input_blobs[0].data[...] = np.abs(net.input_blobs[0].data)
    net.forward()
    top = net.blob_by_name("b0" if in_place else "out")
    output = top.data.copy()
    top.diff[...] = rng.normal(size=top.shape)
    if type_name not in NO_BACKWARD:
        net.backward()
    return output, [b.diff.copy() for b in net.input_blobs], [p.diff.copy() for p in net.params]


@pytest.mark.parametrize("type_name", sorted(IN_PLACE_OK))
def test_layers_allowed_in_place_give_the_same_numbers(type_name):
    params, shapes = IN_PLACE_OK[type_name]
    apart = run_net(type_name, params, shapes, False)
    together = run_net(type_name, params, shapes, True)
    np.testing.assert_allclose(together[0], apart[0], rtol=1e-6, atol=1e-7)
    if type_name not in NO_BACKWARD:
        for got, want in zip(together[1] + together[2], apart[1] + apart[2]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_every_layer_allowed_in_place_is_tested_above():
    allowed = {name for name in registered_types() if layer_class(name).in_place_ok}
    assert allowed - {"Python"} == set(IN_PLACE_OK)


REFUSED = {
    "InnerProduct": ("inner_product_param { num_output: 4 }", [(2, 4)]),
    "Convolution": ("convolution_param { num_output: 3 kernel_size: 1 }", [(1, 3, 2, 2)]),
    "Pooling": ("pooling_param { kernel_size: 1 }", [(1, 3, 2, 2)]),
    "Concat": ("", [(2, 3), (2, 3)]),
    "Eltwise": ("", [(2, 3), (2, 3)]),
    "AbsVal": ("", [(2, 3)]),
    "LRN": ("", [(1, 3, 2, 2)]),
    "Reshape": ("reshape_param { shape { dim: -1 } }", [(2, 3)]),
    "SoftmaxWithLoss": ("", [(2, 3), (2,)]),
}


@pytest.mark.parametrize("type_name", sorted(REFUSED))
def test_layers_that_cannot_run_in_place_are_refused(type_name):
    params, shapes = REFUSED[type_name]
    message = f'layer "l": {type_name} cannot run in place: its top "b0" is also its bottom'
    with pytest.raises(CaffeError, match=f"^{message}") as caught:
        Net(layer_net(type_name, params, shapes, True), TRAIN)
    assert caught.value.layer == "l"


# --- very large nets ---------------------------------------------------------------------------
def relu_chain(count, name="chain"):
    """Input x, then ``count`` ReLU layers, each into a top of its own."""
    layers, bottom = [], "x"
    for i in range(count):
        layers.append(f'layer {{ name: "relu{i}" type: "ReLU" bottom: "{bottom}" top: "r{i}" }}')
        bottom = f"r{i}"
    param = input_net((1, 2), *layers)
    param.name = name
    return param


def echo_of(caplog):
    return next(record.getMessage() for record in caplog.records
                if record.getMessage().startswith("Initializing net from parameters"))


def test_a_net_of_20000_layers_builds_and_runs_in_linear_time(caplog):
    start = time.perf_counter()
    with caplog.at_level(logging.INFO, logger="pycaffe"):
        net = Net(relu_chain(20000), TRAIN)
    net.input_blobs[0].data[...] = [[-1, 2]]
    net.forward()
    net.backward()
    assert time.perf_counter() - start < 60   # about 5 s; minutes before the layer-import fix
    assert len(net.layers) == 20001
    np.testing.assert_array_equal(net.blob_by_name("r19999").data, [[0, 2]])
    assert echo_of(caplog).endswith("# ... (18001 more layers not shown; 20001 in all)\n")


def test_a_net_too_large_for_the_memory_left_is_refused_before_building(monkeypatch):
    """protobuf crashes (SIGSEGV) when an allocation fails, so the need is estimated first."""
    monkeypatch.setattr(sizes, "CHECK_FROM_BYTES", 0)
    monkeypatch.setattr(sizes, "available_memory", lambda: 500 << 10)
    assert len(Net(relu_chain(98), TEST).layers) == 99     # 495 KiB
    with pytest.raises(sizes.AllocationError, match=r"^building a net of 101 layers needs "
                                                    r"about 505\.0 KiB of memory, more than the "
                                                    r"500\.0 KiB available$"):
        Net(relu_chain(100), TEST)


def test_a_prototxt_too_large_to_parse_is_refused_before_parsing(monkeypatch, tmp_path):
    from pycaffe_cli.io.prototxt import read_net_param
    path = tmp_path / "big.prototxt"
    path.write_text("# padding\n" * 500_000)   # 5 MB of text: about 80 MB to parse
    monkeypatch.setattr(sizes, "available_memory", lambda: 64 << 20)
    with pytest.raises(sizes.AllocationError, match=rf"^parsing {path} \(4\.8 MiB of text\) "
                                                    r"needs about 76\.3 MiB of memory, more "
                                                    r"than the 64\.0 MiB available$"):
        read_net_param(str(path))


def test_available_memory_reads_the_system():
    free = sizes.available_memory()
    assert free is None or 0 <= free <= 1 << 60
    assert sizes.physical_memory() is None or sizes.physical_memory() > 64 << 20


def test_a_normal_net_is_echoed_in_full():
    param = vgg16(1)
    assert proto_echo.net_text(param) == text_format.MessageToString(param)


def test_the_capped_echo_is_valid_prototxt_holding_the_first_layers():
    param = relu_chain(proto_echo.MAX_ECHO_LAYERS + 10)
    param.state.phase = TEST
    text = proto_echo.net_text(param)
    assert text.endswith(f"# ... (11 more layers not shown; "
                         f"{proto_echo.MAX_ECHO_LAYERS + 11} in all)\n")
    shown = net_param(text)
    assert len(shown.layer) == proto_echo.MAX_ECHO_LAYERS
    assert shown.name == "chain" and shown.state.phase == TEST
    assert list(shown.layer) == list(param.layer[:proto_echo.MAX_ECHO_LAYERS])


def test_the_echo_also_stops_at_a_byte_limit(monkeypatch):
    monkeypatch.setattr(proto_echo, "MAX_ECHO_BYTES", 1000)
    text = proto_echo.net_text(relu_chain(100))
    assert len(text) < 1200
    assert text.endswith("in all)\n") and "more layers not shown; 101 in all" in text


def test_a_solver_with_a_huge_inline_net_is_echoed_cut(monkeypatch):
    monkeypatch.setattr(proto_echo, "MAX_ECHO_BYTES", 1000)
    solver = caffe_pb2.SolverParameter(base_lr=0.1, max_iter=3)
    solver.net_param.CopyFrom(relu_chain(proto_echo.MAX_ECHO_LAYERS + 5))
    text = proto_echo.solver_text(solver)
    assert text.endswith("# ... (net_param: 6 more layers not shown)\n")
    shown = text_format.Parse(text, caffe_pb2.SolverParameter())
    assert shown.base_lr == pytest.approx(0.1) and shown.max_iter == 3
    assert len(shown.net_param.layer) == proto_echo.MAX_ECHO_LAYERS
    small = caffe_pb2.SolverParameter(base_lr=0.1, net="n.prototxt")
    assert proto_echo.solver_text(small) == text_format.MessageToString(small)
