"""Checks on the fields of a solver state read for a resume (binary proto or HDF5).

A damaged, truncated or hand-edited file ends in one line that names the file and the field,
e.g. ``run_iter_4.solverstate.h5: field "iter": must be between 0 and 2147483647, got -3``,
never in a traceback from deep inside h5py.
"""
import h5py
import numpy as np

from pycaffe_cli.errors import CaffeError

INT32_MAX = 2 ** 31 - 1


def field_error(path, field, message):
    """``CaffeError('<path>: field "<field>": <message>')``."""
    return CaffeError(f'{path}: field "{field}": {message}')


def _type_name(value):
    return "null" if value is None else type(value).__name__


# --- solver state fields -------------------------------------------------------------------
def check_counter(value, path, field):
    """``iter`` or ``current_step``: Caffe's int32 counters, never negative."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise field_error(path, field, f"must be an integer, got {_type_name(value)}")
    if not 0 <= int(value) <= INT32_MAX:
        raise field_error(path, field, f"must be between 0 and {INT32_MAX}, got {value}")
    return int(value)


def check_learned_net(value, path):
    """The weights file a state names: text without NUL bytes ("" for none)."""
    if not isinstance(value, str):
        raise field_error(path, "learned_net", f"must be a string, got {_type_name(value)}")
    if "\0" in value:
        raise field_error(path, "learned_net", "contains a NUL byte")
    return value


# --- HDF5 solver state (Caffe's SnapshotSolverStateToHDF5 layout) --------------------------
def _dataset(container, name, path, field=None):
    item = container.get(name)
    if item is None:
        raise field_error(path, field or name, "missing")
    if not isinstance(item, h5py.Dataset):
        raise field_error(path, field or name, "must be a dataset, found a group")
    if item.shape is None:
        raise field_error(path, field or name, "is an empty dataset (no dataspace)")
    return item


def hdf5_counter(h5, name, path):
    """Read an int dataset of one value (H5LTmake_dataset_int) and check its range."""
    dataset = _dataset(h5, name, path)
    if dataset.dtype.kind not in "iu":
        raise field_error(path, name, f"must be an integer dataset, got type {dataset.dtype}")
    if dataset.size != 1:
        raise field_error(path, name, f"must hold one value, holds {dataset.size} "
                                      f"(shape {dataset.shape})")
    return check_counter(int(np.asarray(dataset[()]).reshape(-1)[0]), path, name)


def hdf5_float(h5, name, path, default):
    """Read a float dataset of one value (hdf5_save_float); ``default`` when it is absent."""
    if name not in h5:
        return default
    dataset = _dataset(h5, name, path)
    if dataset.dtype.kind not in "fiu" or dataset.size != 1:
        raise field_error(path, name, f"must hold one number, holds {dataset.size} values of "
                                      f"type {dataset.dtype}")
    return float(np.float32(np.asarray(dataset[()]).reshape(-1)[0]))


def hdf5_string(h5, name, path):
    """Read a (null-terminated) string dataset; "" when it is absent."""
    if name not in h5:
        return ""
    value = _dataset(h5, name, path)[()]
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise field_error(path, name, f"must be one string, holds {value.size} values")
        value = value.reshape(-1)[0]
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            raise field_error(path, name, "is not valid UTF-8 text") from None
    if not isinstance(value, str):
        raise field_error(path, name, f"must be a string, got {_type_name(value)}")
    return check_learned_net(value.rstrip("\0"), path)


def hdf5_history(h5, path):
    """Read group ``history``'s datasets ``"0"``..``"n-1"`` as float32 arrays."""
    group = h5.get("history")
    if not isinstance(group, h5py.Group):
        raise field_error(path, "history", "missing (a group of datasets '0'..'n-1')"
                          if group is None else "must be a group, found a dataset")
    names = set(group.keys())
    expected = {str(i) for i in range(len(names))}
    for name in sorted(names - expected):
        raise field_error(path, f"history/{name}", f"unexpected: the {len(names)} history "
                                                   f"datasets must be named 0..{len(names) - 1}")
    history = []
    for i in range(len(names)):
        dataset = _dataset(group, str(i), path, f"history/{i}")
        if dataset.dtype.kind not in "fiu":
            raise field_error(path, f"history/{i}", f"must hold numbers, got type "
                                                    f"{dataset.dtype}")
        if dataset.size > INT32_MAX:    # checked before numpy tries to allocate it
            raise field_error(path, f"history/{i}", f"holds {dataset.size} values, more than "
                                                    "a Caffe blob can hold")
        history.append(np.asarray(dataset, dtype=np.float32))
    return history
