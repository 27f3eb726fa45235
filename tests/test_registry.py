"""The layer registry equals BVLC Caffe's registered set, and one net holds every type."""
import os
import subprocess
import sys

import h5py
import numpy as np
from google.protobuf import text_format
from PIL import Image

from pycaffe_cli.data import db
from pycaffe_cli.io.foreign import LAYER_TYPES
from pycaffe_cli.layers.base import layer_class, registered_types
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2

CAFFE_TYPES = """AbsVal Accuracy ArgMax BNLL BatchNorm BatchReindex Bias Clip Concat ContrastiveLoss
Convolution Crop Data Deconvolution Dropout DummyData ELU Eltwise Embed EuclideanLoss Exp Filter
Flatten HDF5Data HDF5Output HingeLoss Im2col ImageData InfogainLoss InnerProduct Input LRN LSTM
LSTMUnit Log MVN MemoryData MultinomialLogisticLoss PReLU Parameter Pooling Power Python RNN ReLU
Reduction Reshape SPP Scale Sigmoid SigmoidCrossEntropyLoss Silence Slice Softmax SoftmaxWithLoss
Split Swish TanH Threshold Tile WindowData""".split()


def test_registry_equals_caffes_set_and_the_fork_layers():
    bvlc = [name for name in registered_types() if layer_class(name).fork is None]
    assert bvlc == sorted(CAFFE_TYPES)
    for name in set(registered_types()) - set(CAFFE_TYPES):
        assert layer_class(name).fork == LAYER_TYPES[name][0], name


def test_the_registry_walks_layer_families_but_not_the_kernels():
    """A fresh process's registry holds the layers of subpackages (convolution/), and the walk
    leaves layers/kernels to the layers that use them (kernels/cuda/pooling.py is imported
    only where the Pooling layer runs on the GPU)."""
    probe = ("import sys; from pycaffe_cli.layers.base import registered_types; "
             "types = registered_types(); "
             "print('Convolution' in types, 'Deconvolution' in types, "
             "'pycaffe_cli.layers.kernels.cuda.pooling' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["True", "True", "False"], done.stdout + done.stderr


def test_pycaffe_layers_lists_the_registry():
    pycaffe = os.path.join(os.path.dirname(sys.executable), "pycaffe")
    result = subprocess.run([pycaffe, "layers"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    # BVLC's types bare, the forks' (registered so far) followed by a tab and their fork
    lines = result.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == registered_types()
    assert [line for line in lines if "\t" not in line] == sorted(CAFFE_TYPES)
    for line in lines:
        if "\t" in line:
            name, source = line.split("\t")
            assert source == f"from {LAYER_TYPES[name][0]}", line


def make_sources(tmp):
    """Tiny files for the data layers: HDF5, LMDB, images, a window file, a Python module."""
    with h5py.File(tmp / "d.h5", "w") as f:
        f["h5data"] = np.arange(12, dtype=np.float32).reshape(4, 3)
        f["h5label"] = np.zeros(4, np.float32)
    (tmp / "h5.txt").write_text(f"{tmp / 'd.h5'}\n")
    database = db.open_db(str(tmp / "lmdb"), mode="new")
    txn = database.transaction()
    for i in range(2):
        datum = caffe_pb2.Datum(channels=1, height=4, width=4, label=i, data=bytes(range(16)))
        txn.put(f"{i:08d}", datum.SerializeToString())
    txn.commit()
    database.close()
    for i in range(2):
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(tmp / f"im{i}.png")
    (tmp / "images.txt").write_text("im0.png 0\nim1.png 1\n")
    (tmp / "windows.txt").write_text(f"# 0\n{tmp / 'im0.png'}\n3\n8\n8\n2\n"
                                     "1 0.9 0 0 5 5\n0 0.1 2 2 7 7\n")
    (tmp / "passthrough.py").write_text(
        "from pycaffe_cli.layers.base import Layer\n"
        "class Passthrough(Layer):\n"
        "    def setup(self, bottom, top): pass\n"
        "    def reshape(self, bottom, top): top[0].reshape(*bottom[0].data.shape)\n"
        "    def forward(self, bottom, top): top[0].data[...] = bottom[0].data\n"
        "    def backward(self, top, propagate_down, bottom):\n"
        "        bottom[0].diff[...] = top[0].diff\n")


def every_type_net(tmp):
    L = []

    def layer(kind, bottoms, tops, body=""):
        name = f"{kind.lower()}{len(L)}"
        fields = [f'name: "{name}" type: "{kind}"'] + [f'bottom: "{b}"' for b in bottoms]
        L.append(" ".join(fields + [f'top: "{t}"' for t in tops] + [body]))

    dummy = ('dummy_data_param { data_filler { type: "gaussian" std: 0.5 } '
             'data_filler { type: "constant" value: 1 } data_filler { type: "constant" value: 1 } '
             'shape { dim: 2 dim: 3 dim: 6 dim: 6 } shape { dim: 2 } shape { dim: 3 dim: 2 } }')
    layer("DummyData", [], ["x", "lab", "cont"], dummy)
    layer("Input", [], ["inp"], "input_param { shape { dim: 2 dim: 4 } }")
    layer("MemoryData", [], ["mem", "memlab"],
          "memory_data_param { batch_size: 2 channels: 1 height: 2 width: 2 }")
    layer("HDF5Data", [], ["h5data", "h5label"],
          f'hdf5_data_param {{ source: "{tmp / "h5.txt"}" batch_size: 2 }}')
    layer("Data", [], ["dbdata", "dblabel"],
          f'data_param {{ source: "{tmp / "lmdb"}" batch_size: 2 backend: LMDB }}')
    layer("ImageData", [], ["imgdata", "imglabel"],
          f'image_data_param {{ source: "{tmp / "images.txt"}" root_folder: "{tmp}/" '
          "batch_size: 2 }")
    layer("WindowData", [], ["windata", "winlabel"],
          f'window_data_param {{ source: "{tmp / "windows.txt"}" batch_size: 2 '
          "fg_threshold: 0.5 bg_threshold: 0.5 } transform_param { crop_size: 4 }")
    conv = "convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: " \
           '"xavier" } }'
    layer("Convolution", ["x"], ["conv"], conv)
    layer("Deconvolution", ["conv"], ["deconv"], conv)
    layer("Im2col", ["x"], ["cols"], "convolution_param { kernel_size: 3 }")
    layer("Pooling", ["conv"], ["pool"], "pooling_param { pool: MAX kernel_size: 2 stride: 2 }")
    layer("LRN", ["conv"], ["lrn"], "lrn_param { local_size: 3 }")
    layer("SPP", ["conv"], ["spp"], "spp_param { pyramid_height: 2 }")
    layer("Crop", ["lrn", "pool"], ["crop"], "crop_param { axis: 2 }")
    layer("Tile", ["pool"], ["tile"], "tile_param { axis: 1 tiles: 2 }")
    layer("Split", ["pool"], ["pool_a", "pool_b"])
    layer("Concat", ["pool_a", "tile"], ["cat"])
    layer("Slice", ["cat"], ["s1", "s2"], "slice_param { slice_point: 4 }")
    layer("Eltwise", ["s1", "pool_b"], ["elt"], "eltwise_param { operation: SUM }")
    layer("Flatten", ["elt"], ["flat"])
    layer("Reshape", ["s2"], ["resh"], "reshape_param { shape { dim: 0 dim: -1 } }")
    for kind, body in (("ReLU", ""), ("Sigmoid", ""), ("TanH", ""), ("AbsVal", ""),
                       ("BNLL", ""), ("Clip", "clip_param { min: -1 max: 1 }"), ("ELU", ""),
                       ("Exp", ""), ("Log", "log_param { shift: 2 }"), ("Power", ""),
                       ("PReLU", ""), ("Swish", ""), ("Dropout", ""), ("BatchNorm", ""),
                       ("Scale", "scale_param { bias_term: true }"), ("Bias", ""), ("MVN", "")):
        layer(kind, ["flat"], [f"n_{kind}"], body)
    layer("Threshold", ["flat"], ["thr"])
    layer("Eltwise", [f"n_{k}" for k in ("ReLU", "Sigmoid", "TanH", "AbsVal", "BNLL", "Clip",
                                         "ELU", "Exp", "Log", "Power", "PReLU", "Swish",
                                         "Dropout", "BatchNorm", "Scale", "Bias", "MVN")],
          ["neurons"])
    layer("Python", ["neurons"], ["py"], 'python_param { module: "passthrough" '
          'layer: "Passthrough" }')
    layer("InnerProduct", ["py"], ["ip"], 'inner_product_param { num_output: 3 weight_filler '
          '{ type: "xavier" } }')
    layer("Softmax", ["ip"], ["prob"])
    layer("SoftmaxWithLoss", ["ip", "lab"], ["l_softmax"])
    layer("Accuracy", ["ip", "lab"], ["acc"])
    layer("ArgMax", ["ip"], ["arg"])
    layer("InnerProduct", ["py"], ["ip_b"], "inner_product_param { num_output: 3 }")
    layer("EuclideanLoss", ["ip", "ip_b"], ["l_euclid"])
    layer("Sigmoid", ["ip_b"], ["target"])
    layer("SigmoidCrossEntropyLoss", ["ip", "target"], ["l_sce"],
          "propagate_down: true propagate_down: false")
    layer("HingeLoss", ["ip", "lab"], ["l_hinge"])
    layer("DummyData", [], ["infogain"], "dummy_data_param { data_filler { type: \"constant\" "
          "value: 1 } shape { dim: 3 dim: 3 } }")
    layer("InfogainLoss", ["ip", "lab", "infogain"], ["l_infogain"])
    layer("ContrastiveLoss", ["ip", "ip_b", "lab"], ["l_contrastive"])
    layer("MultinomialLogisticLoss", ["prob", "lab"], ["l_mlr"])
    layer("Reduction", ["ip"], ["red"], "reduction_param { operation: SUMSQ }")
    layer("Embed", ["lab"], ["emb"], "embed_param { num_output: 2 input_dim: 3 }")
    layer("Filter", ["emb", "lab"], ["kept"])
    layer("BatchReindex", ["ip", "lab"], ["reindexed"])
    layer("Parameter", [], ["param"], "parameter_param { shape { dim: 2 dim: 3 } }")
    layer("DummyData", [], ["seq", "c_prev", "gates", "cont1"],
          'dummy_data_param { data_filler { type: "gaussian" } data_filler { type: "gaussian" } '
          'data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } '
          "shape { dim: 3 dim: 2 dim: 4 } shape { dim: 1 dim: 2 dim: 4 } "
          "shape { dim: 1 dim: 2 dim: 16 } shape { dim: 1 dim: 2 } }")
    layer("RNN", ["seq", "cont"], ["rnn"], "recurrent_param { num_output: 3 }")
    layer("LSTM", ["seq", "cont"], ["lstm"], "recurrent_param { num_output: 3 }")
    layer("LSTMUnit", ["c_prev", "gates", "cont1"], ["c", "h"])
    layer("HDF5Output", ["ip", "lab"], [], f'hdf5_output_param {{ file_name: "{tmp / "o.h5"}" }}')
    layer("Silence", ["inp", "mem", "memlab", "h5data", "h5label", "dbdata", "dblabel",
                      "imgdata", "imglabel", "windata", "winlabel", "deconv", "cols", "spp",
                      "crop", "resh", "thr", "acc", "arg", "red", "kept", "reindexed", "param",
                      "rnn", "lstm", "c", "h"], [])
    text = 'name: "everything"\n' + "\n".join(f"layer {{ {x} }}" for x in L)
    return text_format.Parse(text, caffe_pb2.NetParameter()), {x.split('"')[3] for x in L}


def test_one_net_holds_every_registered_type(tmp_path, monkeypatch):
    make_sources(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    param, kinds = every_type_net(tmp_path)
    assert kinds == set(CAFFE_TYPES)
    net = Net(param, caffe_pb2.TRAIN)
    memory = net.layer_by_name(next(n for n in net.layer_names if n.startswith("memorydata")))
    memory.reset(np.ones((2, 1, 2, 2), np.float32), np.zeros(2, np.float32))
    loss = net.forward()
    assert np.isfinite(loss)
    net.backward()
    conv = net.layer_by_name("convolution7")
    assert conv.type == "Convolution" and np.abs(conv.blobs[0].diff).sum() > 0
    with h5py.File(tmp_path / "o.h5", "r") as written:
        assert written["data"].shape[0] == 2
