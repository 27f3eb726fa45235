"""The exact-resume sidecar ``<state file>.pycaffe.json``, pycaffe's addition to Caffe.

It holds the random generator's state, every layer's ``get_state()`` (train and test nets)
and the SHA-256 of the state file it belongs to. A snapshot writes it *before* its state
file, so a run killed between the two never leaves a newest state without its sidecar; the
hash tells the right sidecar from one written for another state of the same name (a run
killed while overwriting an earlier run's snapshot). Every field is checked on load, and a
bad one ends in one line that names the file and the field.
"""
import hashlib
import json
import os
import re

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.io.input_files import check_input_file
from pycaffe_cli.log import LOG
from pycaffe_cli.solvers.state_checks import field_error

SIDECAR_SUFFIX = ".pycaffe.json"
SIDECAR_FORMAT = 1
_REQUIRED = ("format", "rng", "train", "test")
# Bounds of the integers in a numpy PCG64 state (has_uint32 is a flag).
_GENERATOR_LIMITS = {"has_uint32": 2, "uinteger": 2 ** 32}
_DEFAULT_LIMIT = 2 ** 128
_SHA256 = re.compile(r"[0-9a-f]{64}")
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "an integer",
               float: "a number", bool: "a boolean", type(None): "null"}
_NOT_EXACT = ("resume will not be exact: data layers restart from their beginning and the "
              "random generator is not restored, as in Caffe")


def sha256_hex(data):
    """The SHA-256 of ``data`` (bytes) as 64 lowercase hex digits."""
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path):
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as error:
        raise CaffeError(f"cannot read solver state '{path}': {error.strerror}") from None
    return digest.hexdigest()


# --- writing -----------------------------------------------------------------------------
def write_resume_sidecar(state_path, net, test_nets, state_sha256=None, other_ranks=None):
    """Write ``<state_path>.pycaffe.json`` atomically; return its path.

    Args:
        state_path: the state file the sidecar belongs to.
        net, test_nets: the nets whose layers' ``get_state()`` are saved.
        state_sha256: the SHA-256 (hex) of the state file's bytes, checked on resume.
        other_ranks: in data-parallel training (written by rank 0), ranks 1..N-1's
            ``rank_state`` dicts, saved as "ranks" beside "solver_count": N.
    """
    payload = {"format": SIDECAR_FORMAT,
               "rng": backend.rng().bit_generator.state,
               "train": _layer_states(net),
               "test": [_layer_states(test_net) for test_net in test_nets]}
    if state_sha256 is not None:
        payload["state_sha256"] = state_sha256
    if other_ranks:
        payload["solver_count"] = len(other_ranks) + 1
        payload["ranks"] = list(other_ranks)
    path = state_path + SIDECAR_SUFFIX
    with atomic_write(path, "w") as stream:
        json.dump(payload, stream)
    return path


def rank_state(net):
    """This process's random generator and train-net layer states (one rank's entry)."""
    return {"rng": backend.rng().bit_generator.state, "train": _layer_states(net)}


def _layer_states(net):
    states = {}
    for name, layer in zip(net.layer_names, net.layers):
        value = layer.get_state()
        if value is not None:
            states[name] = value
    return states


# --- reading -----------------------------------------------------------------------------
def read_resume_sidecar(state_path, net, test_nets):
    """Restore the rng and layer states from ``<state_path>.pycaffe.json``.

    Returns:
        True when restored; False (with a WARNING that resume is not exact) when the sidecar
        is missing or belongs to another state file.

    Raises:
        CaffeError: the sidecar is unreadable or a field is missing or invalid.
    """
    sidecar = state_path + SIDECAR_SUFFIX
    if not os.path.lexists(sidecar):
        LOG.warning(f"No {sidecar}: {_NOT_EXACT}")
        return False
    payload = load_sidecar(sidecar)
    expected = payload.get("state_sha256")
    if expected is not None and _file_sha256(state_path) != expected:
        LOG.warning(f"{sidecar} was written for another {os.path.basename(state_path)} (a run "
                    f"stopped while replacing it?) and is ignored: {_NOT_EXACT}")
        return False
    payload = _this_ranks_part(payload, sidecar)
    if payload is None:
        return False
    saved_tests = payload["test"]
    if len(saved_tests) != len(test_nets):
        LOG.warning(f"{sidecar}: saved with {len(saved_tests)} test net(s), this solver has "
                    f"{len(test_nets)}; restoring the first "
                    f"{min(len(saved_tests), len(test_nets))}")
    _restore(payload, net, test_nets, sidecar)
    LOG.info(f"Restored random generator and data layer states from {sidecar}")
    return True


def _this_ranks_part(payload, sidecar):
    """The payload with this rank's rng and train states (data-parallel training saves one
    entry per rank); None, with a WARNING, when the run has another number of ranks."""
    saved = payload.get("solver_count", 1)
    count = backend.solver_setting("solver_count")
    if saved != count:
        LOG.warning(f"{sidecar} was saved by a run on {saved} process(es) and this one has "
                    f"{count}: {_NOT_EXACT}")
        return None
    rank = backend.solver_setting("solver_rank")
    if rank == 0:
        return payload
    return {**payload, **payload["ranks"][rank - 1], "test": []}


def load_sidecar(sidecar):
    """Read and check a sidecar file; return its payload (a dict)."""
    check_input_file(sidecar, "resume state")     # never open a pipe or a device
    try:
        with open(sidecar, encoding="utf-8") as stream:
            payload = json.load(stream)
    except (OSError, ValueError, RecursionError) as error:
        reason = getattr(error, "strerror", None) or error
        raise CaffeError(f"{sidecar}: cannot read the resume state ({reason})") from None
    check_sidecar(payload, sidecar)
    return payload


def _json_type(value):
    return _JSON_TYPES.get(type(value), type(value).__name__)


def check_sidecar(payload, sidecar):
    """Raise CaffeError naming the field unless ``payload`` is a valid sidecar."""
    if not isinstance(payload, dict):
        raise CaffeError(f"{sidecar}: not a pycaffe resume state: expected a JSON object, "
                         f"found {_json_type(payload)}")
    for field in _REQUIRED:
        if field not in payload:
            raise field_error(sidecar, field, "missing")
    version = payload["format"]
    if type(version) is not int or version != SIDECAR_FORMAT:
        raise field_error(sidecar, "format", f"unknown resume-state format {version!r} (this "
                                             f"pycaffe reads format {SIDECAR_FORMAT})")
    check_generator_state(payload["rng"], backend.rng().bit_generator.state, sidecar, "rng")
    _check_layer_states(payload["train"], sidecar, "train")
    tests = payload["test"]
    if not isinstance(tests, list):
        raise field_error(sidecar, "test", f"must be an array, found {_json_type(tests)}")
    for i, states in enumerate(tests):
        _check_layer_states(states, sidecar, f"test[{i}]")
    _check_ranks(payload, sidecar)
    digest = payload.get("state_sha256", "0" * 64)
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise field_error(sidecar, "state_sha256", f"must be 64 lowercase hex digits, found "
                                                   f"{_json_type(digest)} {digest!r:.80}")


def _check_ranks(payload, sidecar):
    """"solver_count" and "ranks" (data-parallel runs): N and N - 1 rank entries."""
    count = payload.get("solver_count", 1)
    if type(count) is not int or count < 1:
        raise field_error(sidecar, "solver_count", f"must be a positive integer, found "
                                                   f"{count!r:.80}")
    ranks = payload.get("ranks", [])
    if not isinstance(ranks, list) or len(ranks) != count - 1:
        raise field_error(sidecar, "ranks", f"must be an array of {count - 1} rank state(s) "
                                            f"(solver_count is {count})")
    template = backend.rng().bit_generator.state
    for i, entry in enumerate(ranks, start=1):
        if not isinstance(entry, dict) or "rng" not in entry or "train" not in entry:
            raise field_error(sidecar, f"ranks[{i - 1}]", "must be an object with rng and "
                                                          "train")
        check_generator_state(entry["rng"], template, sidecar, f"ranks[{i - 1}].rng")
        _check_layer_states(entry["train"], sidecar, f"ranks[{i - 1}].train")


def check_generator_state(value, template, sidecar, field):
    """Check a numpy bit generator state against ``template`` (one of the same kind): the
    same keys, the same generator name, non-negative integers within the type's range."""
    stack = [(value, template, field)]
    while stack:
        item, model, where = stack.pop()
        if isinstance(model, dict):
            if not isinstance(item, dict):
                raise field_error(sidecar, where, f"must be an object, found {_json_type(item)}")
            for key in model:
                if key not in item:
                    raise field_error(sidecar, f"{where}.{key}", "missing")
                stack.append((item[key], model[key], f"{where}.{key}"))
        elif isinstance(model, str):
            if item != model:
                raise field_error(sidecar, where, f"must be {model!r}, found {item!r:.80}")
        else:
            limit = _GENERATOR_LIMITS.get(where.rsplit(".", 1)[-1], _DEFAULT_LIMIT)
            if type(item) is not int:
                raise field_error(sidecar, where, f"must be an integer, found {_json_type(item)}")
            if not 0 <= item < limit:
                raise field_error(sidecar, where, f"must be between 0 and {limit - 1}, found "
                                                  f"{item}")


def _check_layer_states(states, sidecar, field):
    """A {layer name: state} object; generator states inside a layer's state are checked."""
    if not isinstance(states, dict):
        raise field_error(sidecar, field, f"must be an object, found {_json_type(states)}")
    template = backend.rng().bit_generator.state
    stack = [(value, f"{field}.{name}") for name, value in states.items()]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            if item.get("bit_generator") == template["bit_generator"]:
                check_generator_state(item, template, sidecar, where)
                continue
            stack.extend((v, f"{where}.{k}") for k, v in item.items()
                         if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item)
                         if isinstance(v, (dict, list)))


def _restore(payload, net, test_nets, sidecar):
    try:
        backend.rng().bit_generator.state = payload["rng"]
    except (TypeError, ValueError, KeyError, OverflowError) as error:
        raise field_error(sidecar, "rng", f"not a random generator state ({error})") from None
    _set_layer_states(net, payload["train"], sidecar, "train")
    for i, (test_net, states) in enumerate(zip(test_nets, payload["test"])):
        _set_layer_states(test_net, states, sidecar, f"test[{i}]")


def _set_layer_states(net, states, sidecar, field):
    for name, value in states.items():
        if not net.has_layer(name):
            LOG.warning(f'{sidecar}: ignoring the state saved for layer {name}, which net '
                        f'"{net.name}" does not have')
            continue
        try:
            net.layer_by_name(name).set_state(value)
        except CaffeError as error:
            raise field_error(sidecar, f"{field}.{name}", str(error)) from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError,
                OverflowError) as error:
            raise field_error(sidecar, f"{field}.{name}", f"not a saved state of this layer "
                                                          f"({type(error).__name__}: {error})"
                              ) from None
