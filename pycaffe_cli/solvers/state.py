"""Snapshot files: weights, solver state (binary proto or HDF5), and the exact-resume sidecar.

File names are ``<snapshot_prefix>_iter_<N>`` + ``.caffemodel``/``.solverstate`` (or
``.caffemodel.h5``/``.solverstate.h5`` for snapshot_format HDF5), as Caffe names them. The
HDF5 solver state has Caffe's SnapshotSolverStateToHDF5 layout: int datasets ``iter`` and
``current_step`` (shape (1,)), a null-terminated string dataset ``learned_net``, and a group
``history`` holding datasets ``"0"``..``"n-1"`` shaped like their params.

Beyond Caffe: beside each state file, ``<state file>.pycaffe.json`` records the random
generator's state and every layer's ``get_state()`` (train and test nets), so a resumed run
continues exactly like an uninterrupted one. Every file is written atomically.
"""
import json
import os
from types import SimpleNamespace

import h5py
import numpy as np
from google.protobuf.message import DecodeError

from pycaffe_cli import backend, net_weights
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.files import atomic_output_path, atomic_write
from pycaffe_cli.io.weights import blob_proto_to_array, fill_blob_proto
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2

HDF5 = caffe_pb2.SolverParameter.HDF5
SIDECAR_SUFFIX = ".pycaffe.json"
SIDECAR_FORMAT = 1


# --- names and the snapshot prefix ----------------------------------------------------------
def snapshot_filename(prefix, iteration, extension):
    """``<prefix>_iter_<iteration><extension>`` (Caffe's SnapshotFilename)."""
    return f"{prefix}_iter_{iteration}{extension}"


def upgrade_snapshot_prefix(param, solver_path):
    """Caffe's UpgradeSnapshotPrefixProperty: default or complete the snapshot prefix.

    No prefix: the solver file's path without its extension. A prefix naming a directory:
    that directory joined with the solver file's stem.
    """
    stem_path = os.path.splitext(solver_path)[0]
    if not param.HasField("snapshot_prefix"):
        param.snapshot_prefix = stem_path
        LOG.info(f"snapshot_prefix was not specified and is set to {param.snapshot_prefix}")
    elif os.path.isdir(param.snapshot_prefix):
        param.snapshot_prefix = os.path.join(param.snapshot_prefix,
                                             os.path.basename(stem_path))
        LOG.info(f"snapshot_prefix was a directory and is replaced to {param.snapshot_prefix}")


def check_snapshot_write_permissions(param):
    """Caffe's CheckSnapshotWritePermissions: fail early if snapshots cannot be written."""
    if not param.snapshot:
        return
    if not param.HasField("snapshot_prefix"):
        raise CaffeError("In solver params, snapshot is specified but snapshot_prefix is not")
    probe = snapshot_filename(param.snapshot_prefix, 0, ".tempfile")
    try:
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError:
        raise CaffeError(f"Cannot write to snapshot prefix '{param.snapshot_prefix}'.  Make "
                         "sure that the directory exists and is writable.") from None


# --- writing -----------------------------------------------------------------------------
def write_model(net, param, iteration):
    """Write the net's weights (Caffe's SnapshotToBinaryProto/ToHDF5); return the file name."""
    if param.snapshot_format == HDF5:
        path = snapshot_filename(param.snapshot_prefix, iteration, ".caffemodel.h5")
        LOG.info(f"Snapshotting to HDF5 file {path}")
        net_weights.save_hdf5(net, path, param.snapshot_diff)
    else:
        path = snapshot_filename(param.snapshot_prefix, iteration, ".caffemodel")
        LOG.info(f"Snapshotting to binary proto file {path}")
        net_weights.save_binaryproto(net, path, param.snapshot_diff)
    return path


def write_solver_state(param, iteration, learned_net, current_step, history):
    """Write iter, learned_net, current_step and the history Blobs; return the file name."""
    if param.snapshot_format == HDF5:
        path = snapshot_filename(param.snapshot_prefix, iteration, ".solverstate.h5")
        LOG.info(f"Snapshotting solver state to HDF5 file {path}")
        with atomic_output_path(path) as temp_path, h5py.File(temp_path, "w") as h5:
            _write_int(h5, "iter", iteration)
            _write_string(h5, "learned_net", learned_net)
            _write_int(h5, "current_step", current_step)
            group = h5.create_group("history")
            for i, blob in enumerate(history):
                group.create_dataset(str(i), data=blob.read_data().astype(np.float32))
        return path
    path = snapshot_filename(param.snapshot_prefix, iteration, ".solverstate")
    state = caffe_pb2.SolverState(iter=iteration, learned_net=learned_net,
                                  current_step=current_step)
    for blob in history:
        fill_blob_proto(state.history.add(), blob.read_data())
    LOG.info(f"Snapshotting solver state to binary proto file {path}")
    with atomic_write(path, "wb") as stream:
        stream.write(state.SerializeToString())
    return path


def _write_int(h5, name, value):
    """An H5LTmake_dataset_int dataset: one native int in a 1-d dataspace."""
    h5.create_dataset(name, data=np.array([value], dtype=np.int32))


def _write_string(h5, name, text):
    """An H5LTmake_dataset_string dataset: a scalar, null-terminated fixed-length string."""
    raw = text.encode()
    string_type = h5py.h5t.C_S1.copy()
    string_type.set_size(len(raw) + 1)
    string_type.set_strpad(h5py.h5t.STR_NULLTERM)
    space = h5py.h5s.create(h5py.h5s.SCALAR)
    dataset = h5py.h5d.create(h5.id, name.encode(), string_type, space)
    dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array(raw + b"\0", dtype=f"S{len(raw) + 1}"))


def write_resume_sidecar(state_path, net, test_nets):
    """Write ``<state_path>.pycaffe.json``: the rng state and every layer's get_state()."""
    payload = {"format": SIDECAR_FORMAT,
               "rng": backend.rng().bit_generator.state,
               "train": _layer_states(net),
               "test": [_layer_states(test_net) for test_net in test_nets]}
    with atomic_write(state_path + SIDECAR_SUFFIX, "w") as stream:
        json.dump(payload, stream)


def _layer_states(net):
    states = {}
    for name, layer in zip(net.layer_names, net.layers):
        value = layer.get_state()
        if value is not None:
            states[name] = value
    return states


# --- reading -----------------------------------------------------------------------------
def read_solver_state(path):
    """Read a .solverstate (binary) or .solverstate.h5 (any name ending ".h5").

    Returns:
        a namespace with iter, learned_net ("" when absent), current_step, history (a list
        of float32 arrays) and is_hdf5.
    """
    if not os.path.isfile(path):
        raise CaffeError(f"{path}: solver state file not found")
    if path.endswith(".h5"):
        return _read_hdf5_state(path)
    with open(path, "rb") as stream:
        data = stream.read()
    state = caffe_pb2.SolverState()
    try:
        state.ParseFromString(data)
    except DecodeError:
        raise CaffeError(f"{path}: not a binary SolverState file") from None
    history = [_blob_proto_array(blob, path, i) for i, blob in enumerate(state.history)]
    return SimpleNamespace(iter=state.iter, learned_net=state.learned_net,
                           current_step=state.current_step, history=history, is_hdf5=False)


def _blob_proto_array(proto, path, index):
    try:
        return blob_proto_to_array(proto)
    except CaffeError as error:
        raise CaffeError(f"{path}: history blob {index}: {error}") from None


def _read_hdf5_state(path):
    try:
        with h5py.File(path, "r") as h5:
            iteration = _read_int(h5, "iter", path)
            learned_net = _read_string(h5["learned_net"]) if "learned_net" in h5 else ""
            current_step = _read_int(h5, "current_step", path)
            if "history" not in h5:
                raise CaffeError(f"{path}: Error reading history (no 'history' group)")
            group = h5["history"]
            history = []
            for i in range(len(group)):
                if str(i) not in group:
                    raise CaffeError(f"{path}: history dataset '{i}' is missing")
                history.append(np.asarray(group[str(i)], dtype=np.float32))
    except OSError as error:
        raise CaffeError(f"{path}: cannot read HDF5 solver state ({error})") from None
    return SimpleNamespace(iter=iteration, learned_net=learned_net, current_step=current_step,
                           history=history, is_hdf5=True)


def _read_int(h5, name, path):
    if name not in h5:
        raise CaffeError(f"{path}: no '{name}' dataset in the solver state")
    return int(np.asarray(h5[name]).reshape(-1)[0])


def _read_string(dataset):
    value = dataset[()]
    if isinstance(value, np.ndarray):
        value = value.reshape(-1)[0]
    if isinstance(value, bytes):
        value = value.decode()
    return str(value).rstrip("\0")


def locate_learned_net(learned_net, state_path):
    """The weights file a state names: as written (Caffe's rule, relative to the working
    directory) or, when that does not exist, the same file name beside the state file."""
    if os.path.exists(learned_net):
        return learned_net
    beside = os.path.join(os.path.dirname(state_path), os.path.basename(learned_net))
    if os.path.exists(beside):
        LOG.info(f"learned_net {learned_net} not found; using {beside} beside the state file")
        return beside
    raise CaffeError(f"{state_path}: its weights file {learned_net} (learned_net) not found")


def read_resume_sidecar(state_path, net, test_nets):
    """Restore the rng and layer states from ``<state_path>.pycaffe.json`` if present."""
    sidecar = state_path + SIDECAR_SUFFIX
    if not os.path.isfile(sidecar):
        LOG.info(f"No {sidecar}: data layers restart from their beginning and the random "
                 "generator is not restored, as in Caffe")
        return False
    try:
        with open(sidecar) as stream:
            payload = json.load(stream)
    except (OSError, ValueError) as error:
        raise CaffeError(f"{sidecar}: cannot read the resume state ({error})") from None
    if payload.get("format") != SIDECAR_FORMAT:
        raise CaffeError(f"{sidecar}: unknown resume-state format {payload.get('format')!r}")
    saved_tests = payload.get("test", [])
    if len(saved_tests) != len(test_nets):
        LOG.warning(f"{sidecar}: saved with {len(saved_tests)} test net(s), this solver has "
                    f"{len(test_nets)}; restoring the first "
                    f"{min(len(saved_tests), len(test_nets))}")
    try:
        backend.rng().bit_generator.state = payload.get("rng")
    except (TypeError, ValueError, KeyError) as error:
        raise CaffeError(f"{sidecar}: bad random generator state ({error})") from None
    _set_layer_states(net, payload.get("train", {}), sidecar)
    for test_net, states in zip(test_nets, saved_tests):
        _set_layer_states(test_net, states, sidecar)
    LOG.info(f"Restored random generator and data layer states from {sidecar}")
    return True


def _set_layer_states(net, states, sidecar):
    for name, value in states.items():
        if not net.has_layer(name):
            LOG.warning(f'{sidecar}: ignoring the state saved for layer {name}, which net '
                        f'"{net.name}" does not have')
            continue
        net.layer_by_name(name).set_state(value)
