"""The module-level part of ``import caffe``: BVLC's names, modes, seeds, layer list, Timer,
and caffe.proto.caffe_pb2 being the engine's own message classes."""
import numpy as np
import pytest

import caffe
from pycaffe_cli import backend
from pycaffe_cli.proto import caffe_pb2 as engine_pb2


def test_bvlc_names_exist():
    for name in ["Net", "SGDSolver", "NesterovSolver", "AdaGradSolver", "RMSPropSolver",
                 "AdaDeltaSolver", "AdamSolver", "NCCL", "Timer", "init_log", "log",
                 "set_mode_cpu", "set_mode_gpu", "set_device", "Layer", "get_solver",
                 "layer_type_list", "set_random_seed", "solver_count", "set_solver_count",
                 "solver_rank", "set_solver_rank", "set_multiprocess", "has_nccl",
                 "__version__", "TRAIN", "TEST", "io", "Classifier", "Detector", "NetSpec",
                 "layers", "params", "to_proto"]:
        assert hasattr(caffe, name), name
    assert caffe.__version__ == "1.0.0"
    assert (caffe.TRAIN, caffe.TEST) == (0, 1)


def test_proto_module_is_the_engines():
    from caffe.proto import caffe_pb2
    import caffe.proto.caffe_pb2 as by_path
    assert caffe_pb2 is engine_pb2 and by_path is engine_pb2


def test_layer_type_list():
    """BVLC's 61 types, and the layers of other forks pycaffe implements (each names its
    fork)."""
    from pycaffe_cli.layers.base import layer_class
    types = caffe.layer_type_list()
    assert types == sorted(types)
    bvlc = [name for name in types if layer_class(name).fork is None]
    assert len(bvlc) == 61
    assert {"Python", "Convolution", "InnerProduct", "Data", "LSTM"} <= set(bvlc)
    assert {"PriorBox", "DetectionOutput", "MultiBoxLoss", "ROIPooling"} <= set(types) - set(bvlc)


def test_random_seed_makes_fillers_repeatable(tmp_path):
    path = tmp_path / "n.prototxt"
    path.write_text('layer { name: "d" type: "DummyData" top: "d" dummy_data_param { '
                    'shape { dim: 3 } data_filler { type: "gaussian" } } }')
    caffe.set_random_seed(5)
    first = caffe.Net(str(path), caffe.TEST).forward()["d"].copy()
    caffe.set_random_seed(5)
    assert np.array_equal(caffe.Net(str(path), caffe.TEST).forward()["d"], first)


def test_modes_and_multi_solver_settings():
    caffe.set_mode_cpu()
    assert backend.mode() is backend.Mode.CPU
    caffe.set_solver_count(3)
    caffe.set_solver_rank(2)
    assert (caffe.solver_count(), caffe.solver_rank()) == (3, 2)
    caffe.set_solver_count(1)
    caffe.set_solver_rank(0)
    assert caffe.has_nccl() is False
    with pytest.raises(caffe.pycaffe.CaffeError, match="non-negative"):
        caffe.set_device(-1)


@pytest.mark.gpu
def test_set_mode_gpu_uses_the_chosen_device():
    from tests.gpu_helpers import skip_without_cuda
    skip_without_cuda()
    caffe.set_device(0)
    caffe.set_mode_gpu()
    try:
        assert backend.mode() is backend.Mode.GPU and backend.device() == 0
    finally:
        caffe.set_mode_cpu()


def test_timer_measures_milliseconds():
    timer = caffe.Timer()
    timer.start()
    sum(range(10000))
    timer.stop()
    assert 0 < timer.ms < 1000


def test_log_and_init_log(capsys):
    from pycaffe_cli.log import LOG
    saved = LOG.handlers[:], LOG.level, LOG.propagate
    try:
        caffe.init_log(1)
        caffe.log("hidden at WARNING level")
        assert "hidden" not in capsys.readouterr().err
        caffe.init_log()
        caffe.log("shown")
        assert "] shown" in capsys.readouterr().err
    finally:
        LOG.handlers[:], LOG.level, LOG.propagate = saved
