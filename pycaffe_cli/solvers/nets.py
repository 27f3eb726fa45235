"""Building a solver's train net and test nets (Caffe's Solver::InitTrainNet/InitTestNets).

The train net comes from exactly one of ``net``, ``net_param``, ``train_net``,
``train_net_param``. Test nets come from ``test_net_param`` entries, then ``test_net`` files,
then as many copies of the generic ``net``/``net_param`` as there are test_iter values left.
Each net's NetState is the phase (TRAIN/TEST), merged with the net's own ``state``, merged with
the solver's ``train_state``/``test_state[i]`` (highest precedence). Net files are read relative
to the working directory, as Caffe reads them.
"""
from pycaffe_cli.net import weights as net_weights
from pycaffe_cli.errors import CaffeError, located
from pycaffe_cli.log import LOG
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.solvers.param_checks import check_test_nets

TRAIN_NET_FIELDS = "net, net_param, train_net, train_net_param"


def read_net_file(path):
    """Read and upgrade a net prototxt (Caffe's ReadNetParamsFromTextFileOrDie)."""
    from pycaffe_cli.io.prototxt import read_net_param
    from pycaffe_cli.io.upgrade import upgrade_net
    return upgrade_net(read_net_param(path), source=path)


def _with_state(net_param, phase, override):
    state = caffe_pb2.NetState(phase=phase)
    state.MergeFrom(net_param.state)
    if override is not None:
        state.MergeFrom(override)
    net_param.state.CopyFrom(state)
    return net_param


def _build(net_param, path):
    """Build a Net; errors from a net file point at the file (and the layer's line)."""
    try:
        return Net(net_param)
    except CaffeError as error:
        if path is None:
            raise
        from pycaffe_cli.io.prototxt import locate_layer
        where = locate_layer(path, error.layer) if error.layer else path
        raise located(error, where) from None


def _load_weights(net, solver_param):
    """The solver's ``weights`` field: comma-separated weight files, copied in order."""
    for model_list in solver_param.weights:
        for name in model_list.split(","):
            name = name.strip()
            LOG.info(f"Finetuning from {name}")
            net_weights.copy_trained_layers_from(net, name)


def check_train_net_source(solver_param):
    """Exactly one of net, net_param, train_net, train_net_param must name the train net."""
    sources = [solver_param.HasField(f) for f in TRAIN_NET_FIELDS.split(", ")]
    if sum(sources) < 1:
        raise CaffeError("SolverParameter must specify a train net using one of these "
                         f"fields: {TRAIN_NET_FIELDS}")
    if sum(sources) > 1:
        raise CaffeError("SolverParameter must not contain more than one of these fields "
                         f"specifying a train_net: {TRAIN_NET_FIELDS}")


def build_train_net(solver_param):
    """The TRAIN-phase Net a solver parameter specifies (with ``weights`` loaded)."""
    check_train_net_source(solver_param)
    path = None
    if solver_param.HasField("train_net_param"):
        LOG.info("Creating training net specified in train_net_param.")
        net_param = _copy(solver_param.train_net_param)
    elif solver_param.HasField("train_net"):
        path = solver_param.train_net
        LOG.info(f"Creating training net from train_net file: {path}")
        net_param = read_net_file(path)
    elif solver_param.HasField("net_param"):
        LOG.info("Creating training net specified in net_param.")
        net_param = _copy(solver_param.net_param)
    else:
        path = solver_param.net
        LOG.info(f"Creating training net from net file: {path}")
        net_param = read_net_file(path)
    _with_state(net_param, caffe_pb2.TRAIN, solver_param.train_state)
    net = _build(net_param, path)
    _load_weights(net, solver_param)
    return net


def build_test_nets(solver_param):
    """The TEST-phase Nets, one per test_iter entry, in Caffe's order (the counts are checked
    first: param_checks.check_test_nets)."""
    check_test_nets(solver_param)
    specs = [("test_net_param", _copy(p), None) for p in solver_param.test_net_param]
    specs += [(f"test_net file: {path}", read_net_file(path), path)
              for path in solver_param.test_net]
    remaining = len(solver_param.test_iter) - len(specs)
    if remaining > 1 and not solver_param.test_state:
        LOG.warning(f"the generic net is tested {remaining} times, once per test_iter value "
                    "left after the test_net/test_net_param entries (test_state entries can "
                    "give each test its own stages)")
    if solver_param.HasField("net_param"):
        specs += [("net_param", _copy(solver_param.net_param), None)
                  for _ in range(remaining)]
    if solver_param.HasField("net"):
        specs += [(f"net file: {solver_param.net}", read_net_file(solver_param.net),
                   solver_param.net) for _ in range(remaining)]
    nets = []
    for i, (source, net_param, path) in enumerate(specs):
        override = solver_param.test_state[i] if solver_param.test_state else None
        _with_state(net_param, caffe_pb2.TEST, override)
        LOG.info(f"Creating test net (#{i}) specified by {source}")
        net = _build(net_param, path)
        net.debug_info = solver_param.debug_info
        _load_weights(net, solver_param)
        nets.append(net)
    return nets


def _copy(message):
    copy = type(message)()
    copy.CopyFrom(message)
    return copy
