"""Snapshot files: weights, solver state (binary proto or HDF5), and the exact-resume sidecar.

File names are ``<snapshot_prefix>_iter_<N>`` + ``.caffemodel``/``.solverstate`` (or
``.caffemodel.h5``/``.solverstate.h5`` for snapshot_format HDF5), as Caffe names them. The
HDF5 solver state has Caffe's SnapshotSolverStateToHDF5 layout: int datasets ``iter`` and
``current_step`` (shape (1,)), a null-terminated string dataset ``learned_net``, and a group
``history`` holding datasets ``"0"``..``"n-1"`` shaped like their params. With SSD's lr_policy
"plateau" both formats also carry its state as the fork writes it: ``minimum_loss`` and
``iter_last_event`` (SolverState fields 5 and 6; HDF5 datasets of those names). A state
without them reads as the fork's proto defaults (1e38 and 0).

Beyond Caffe: beside each state file, ``<state file>.pycaffe.json`` records the random
generator's state and every layer's ``get_state()`` (train and test nets), so a resumed run
continues exactly like an uninterrupted one, and the SHA-256 of the weights and state files,
so that a snapshot is resumed only as the unit it was written (see sidecar.py). Every file is
written atomically, HDF5 files through memory (see io/hdf5_image.py), and a snapshot's state
file last, so that it never exists without its weights and sidecar.
"""
import contextlib
import os
import tempfile
from types import SimpleNamespace

import h5py
import numpy as np
from google.protobuf.message import DecodeError

from pycaffe_cli.net import weights as net_weights
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.files import atomic_write, check_output_target, read_bytes
from pycaffe_cli.io.hdf5_image import hdf5_bytes, in_memory_hdf5
from pycaffe_cli.io.input_files import PROTO_LIMIT, check_input_file
from pycaffe_cli.io.weights import blob_proto_to_array, fill_blob_proto
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.solvers.sidecar import (SIDECAR_SUFFIX, sha256_hex, warn_before_overwriting,
                                         write_resume_sidecar)
from pycaffe_cli.solvers.state_checks import (check_counter, check_learned_net, hdf5_counter,
                                              hdf5_float, hdf5_history, hdf5_string)

HDF5 = caffe_pb2.SolverParameter.HDF5
DEFAULT_MINIMUM_LOSS = float(np.float32(caffe_pb2.SolverState().minimum_loss))


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
    """Caffe's CheckSnapshotWritePermissions: fail early if snapshots cannot be written.

    Caffe opens ``<prefix>_iter_0.tempfile`` for writing; the probe here is a new file of a
    unique name (made exclusively), so whatever stands at that name is never truncated."""
    if not param.snapshot:
        return
    if not param.HasField("snapshot_prefix"):
        raise CaffeError("In solver params, snapshot is specified but snapshot_prefix is not")
    probe = snapshot_filename(param.snapshot_prefix, 0, ".")
    try:
        fd, name = tempfile.mkstemp(prefix=os.path.basename(probe), suffix=".tempfile",
                                    dir=os.path.dirname(probe) or ".")
        os.close(fd)
        os.remove(name)
    except (OSError, ValueError):
        raise CaffeError(f"Cannot write to snapshot prefix '{param.snapshot_prefix}'.  Make "
                         "sure that the directory exists and is writable.") from None


# --- writing -----------------------------------------------------------------------------
def model_filename(param, iteration):
    """The weights file of a snapshot: .caffemodel, or .caffemodel.h5 for HDF5."""
    extension = ".caffemodel.h5" if param.snapshot_format == HDF5 else ".caffemodel"
    return snapshot_filename(param.snapshot_prefix, iteration, extension)


def state_filename(param, iteration):
    """The state file of a snapshot: .solverstate, or .solverstate.h5 for HDF5."""
    extension = ".solverstate.h5" if param.snapshot_format == HDF5 else ".solverstate"
    return snapshot_filename(param.snapshot_prefix, iteration, extension)


def write_model(net, param, iteration):
    """Write the net's weights (Caffe's SnapshotToBinaryProto/ToHDF5); return the file name
    and the bytes written."""
    path = model_filename(param, iteration)
    if param.snapshot_format == HDF5:
        LOG.info(f"Snapshotting to HDF5 file {path}")
        return path, net_weights.save_hdf5(net, path, param.snapshot_diff)
    LOG.info(f"Snapshotting to binary proto file {path}")
    return path, net_weights.save_binaryproto(net, path, param.snapshot_diff)


def write_snapshot(param, iteration, net, test_nets, current_step, history, run_id,
                   other_ranks=None, plateau=None):
    """Write one snapshot as a unit: the weights, the resume sidecar, then the solver state.

    Args:
        run_id: the run's id (sidecar.new_run_id), recorded in the sidecar.
        other_ranks: data-parallel training's ranks 1..N-1 states for the sidecar.
        plateau: lr_policy "plateau"'s state (lr_policy.PlateauState), written when the
            policy is "plateau".

    The state file is renamed into place last, so a run killed at any moment leaves every
    state file beside its weights and its sidecar (a state whose weights or sidecar were
    replaced by a later, interrupted snapshot is refused on resume: the sidecar holds both
    files' SHA-256). Files of another run at these names are replaced after a WARNING. On
    failure earlier snapshots are never touched, and the new sidecar is removed unless an
    older state file stands at its state's name (the sidecar then keeps that mix from being
    resumed).

    Returns:
        The state file's name.

    Raises:
        CaffeError: a file cannot be written (disk full, folder gone or read-only, a pipe or
        a folder at its name); the message names the file.
    """
    model_file, state_file = model_filename(param, iteration), state_filename(param, iteration)
    sidecar = state_file + SIDECAR_SUFFIX
    try:
        for path in (model_file, sidecar, state_file):
            check_output_target(path)
        warn_before_overwriting((model_file, sidecar, state_file), sidecar, run_id)
        _, weights = write_model(net, param, iteration)
        _, encoded = encode_solver_state(param, iteration, model_file, current_step, history,
                                         plateau)
        write_resume_sidecar(state_file, net, test_nets,
                             {"run_id": run_id, "weights_sha256": sha256_hex(weights),
                              "state_sha256": sha256_hex(encoded)}, other_ranks)
        try:
            with atomic_write(state_file, "wb") as stream:
                stream.write(encoded)
        except BaseException:
            if not os.path.lexists(state_file):
                with contextlib.suppress(OSError):
                    os.remove(sidecar)
            raise
    except CaffeError as error:
        raise CaffeError(f"{error} (the snapshot of iteration {iteration} is not written; "
                         "earlier snapshots are kept)") from None
    return state_file


def encode_solver_state(param, iteration, learned_net, current_step, history, plateau=None):
    """The state file's name and bytes (binary SolverState or Caffe's HDF5 layout)."""
    path = state_filename(param, iteration)
    if param.lr_policy != "plateau":
        plateau = None
    if param.snapshot_format == HDF5:
        LOG.info(f"Snapshotting solver state to HDF5 file {path}")
        with in_memory_hdf5() as h5:
            _write_int(h5, "iter", iteration)
            _write_string(h5, "learned_net", learned_net)
            _write_int(h5, "current_step", current_step)
            if plateau is not None:
                _write_int(h5, "iter_last_event", plateau.iter_last_event)
                h5.create_dataset("minimum_loss",
                                  data=np.array([plateau.minimum_loss], dtype=np.float32))
            group = h5.create_group("history")
            for i, blob in enumerate(history):
                group.create_dataset(str(i), data=blob.cpu_data.astype(np.float32))
            return path, hdf5_bytes(h5)
    state = caffe_pb2.SolverState(iter=iteration, learned_net=learned_net,
                                  current_step=current_step)
    if plateau is not None:
        state.minimum_loss = plateau.minimum_loss
        state.iter_last_event = plateau.iter_last_event
    for blob in history:
        fill_blob_proto(state.history.add(), blob.cpu_data)
    LOG.info(f"Snapshotting solver state to binary proto file {path}")
    return path, state.SerializeToString()


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


# --- reading -----------------------------------------------------------------------------
def read_solver_state(path):
    """Read a .solverstate (binary) or .solverstate.h5 (any name ending ".h5").

    Returns:
        a namespace with iter, learned_net ("" when absent), current_step, history (a list
        of float32 arrays), is_hdf5, minimum_loss and iter_last_event ("plateau"'s state).
    """
    if not os.path.lexists(path):
        raise CaffeError(f"{path}: solver state file not found")
    check_input_file(path, "solver state", PROTO_LIMIT)   # never open a pipe or a device
    if path.endswith(".h5"):
        return _read_hdf5_state(path)
    data = read_bytes(path, "solver state", PROTO_LIMIT)
    state = caffe_pb2.SolverState()
    try:
        state.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as error:
        raise CaffeError(f"{path}: not a binary SolverState file (damaged or truncated: "
                         f"{error})") from None
    history = [_blob_proto_array(blob, path, i) for i, blob in enumerate(state.history)]
    return SimpleNamespace(iter=check_counter(state.iter, path, "iter"),
                           learned_net=check_learned_net(state.learned_net, path),
                           current_step=check_counter(state.current_step, path,
                                                      "current_step"),
                           history=history, is_hdf5=False,
                           minimum_loss=float(np.float32(state.minimum_loss)),
                           iter_last_event=check_counter(state.iter_last_event, path,
                                                         "iter_last_event"))


def _blob_proto_array(proto, path, index):
    try:
        return blob_proto_to_array(proto)
    except CaffeError as error:
        raise CaffeError(f"{path}: history blob {index}: {error}") from None


def _read_hdf5_state(path):
    """Read Caffe's HDF5 state layout; every field is checked (see state_checks)."""
    try:
        with h5py.File(path, "r") as h5:
            return SimpleNamespace(iter=hdf5_counter(h5, "iter", path),
                                   learned_net=hdf5_string(h5, "learned_net", path),
                                   current_step=hdf5_counter(h5, "current_step", path),
                                   history=hdf5_history(h5, path), is_hdf5=True,
                                   minimum_loss=hdf5_float(h5, "minimum_loss", path,
                                                           DEFAULT_MINIMUM_LOSS),
                                   iter_last_event=(hdf5_counter(h5, "iter_last_event", path)
                                                    if "iter_last_event" in h5 else 0))
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as error:
        reason = " ".join(str(error).split())    # h5py's messages can span lines
        raise CaffeError(f"{path}: cannot read HDF5 solver state (damaged or truncated: "
                         f"{reason})") from None


def find_learned_net(learned_net, state_path):
    """The weights file a state names: as written (Caffe's rule, relative to the working
    directory) or, when that does not exist, the same file name beside the state file;
    None when neither exists (or the state names none)."""
    if not learned_net:
        return None
    if os.path.exists(learned_net):
        return learned_net
    beside = os.path.join(os.path.dirname(state_path), os.path.basename(learned_net))
    if os.path.exists(beside):
        LOG.info(f"learned_net {learned_net} not found; using {beside} beside the state file")
        return beside
    return None


def locate_learned_net(learned_net, state_path):
    """``find_learned_net``, or CaffeError when the file is not found."""
    found = find_learned_net(learned_net, state_path)
    if found is None:
        raise CaffeError(f"{state_path}: its weights file {learned_net} (learned_net) not "
                         "found")
    return found
