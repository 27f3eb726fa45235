"""The exact-resume sidecar ``<state file>.pycaffe.json``, pycaffe's addition to Caffe.

It holds the random generator's state and every layer's ``get_state()`` (train and test nets),
and it binds a snapshot's files into one unit: the SHA-256 of the weights file and of the state
file as they were written, and the run's id (random, made when a run starts from scratch and
kept across its resumes). A snapshot writes the weights, then the sidecar, then the state, each
renamed into place, so a run killed at any moment leaves its newest complete unit resumable.

A run killed (or stopped by a full disk) while replacing another run's snapshot of the same
name leaves one run's weights beside the other's state; the hashes tell, and such a mix is
refused on resume, naming the snapshot. A run about to replace snapshot files written by
another run (or by a writer that left no sidecar) says so in one WARNING first; Caffe
overwrites them silently. Every field is checked on load (sidecar_checks.py and the layers'
``set_state``), and a bad one ends in one line that names the file and the field.
"""
import hashlib
import json
import os
import secrets
from typing import NamedTuple, Optional

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.io.input_files import LIST_LIMIT, check_input_file, read_input_bytes
from pycaffe_cli.state_fields import StateFieldError
from pycaffe_cli.log import LOG
from pycaffe_cli.solvers.sidecar_checks import (  # noqa: F401 (check_sidecar: re-exported)
    SIDECAR_FORMAT, check_layers_match, check_sidecar, check_test_count, layer_field,
    load_sidecar, parse_json)
from pycaffe_cli.solvers.state_checks import field_error

SIDECAR_SUFFIX = ".pycaffe.json"
_NOT_EXACT = ("resume will not be exact: data layers restart from their beginning and the "
              "random generator is not restored, as in Caffe")


def sha256_hex(data):
    """The SHA-256 of ``data`` (bytes) as 64 lowercase hex digits."""
    return hashlib.sha256(data).hexdigest()


def new_run_id():
    """A run's identity: 32 random hex digits (never drawn from the training generator)."""
    return secrets.token_hex(16)


def _file_sha256(path, what):
    check_input_file(path, what)      # never open a pipe or a device
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as error:
        raise CaffeError(f"cannot read {what} '{path}': {error.strerror}") from None
    return digest.hexdigest()


# --- writing -----------------------------------------------------------------------------
def write_resume_sidecar(state_path, net, test_nets, binding, other_ranks=None):
    """Write ``<state_path>.pycaffe.json`` atomically; return its path.

    Args:
        state_path: the state file the sidecar belongs to.
        net, test_nets: the nets whose layers' ``get_state()`` are saved.
        binding: {"run_id", "weights_sha256", "state_sha256"}: the run and the SHA-256 (hex)
            of the weights and state files' bytes, checked on resume.
        other_ranks: in data-parallel training (written by rank 0), ranks 1..N-1's
            ``rank_state`` dicts, saved as "ranks" beside "solver_count": N.
    """
    payload = {"format": SIDECAR_FORMAT, "run_id": binding["run_id"],
               "weights_sha256": binding["weights_sha256"],
               "state_sha256": binding["state_sha256"],
               "rng": backend.rng().bit_generator.state,
               "train": _layer_states(net),
               "test": [_layer_states(test_net) for test_net in test_nets]}
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


def warn_before_overwriting(paths, sidecar, run_id):
    """One WARNING when some of ``paths`` (a snapshot's files) exist and were not written by
    run ``run_id``: ``sidecar`` (the snapshot's sidecar path) names another run, or is absent
    or unreadable (Caffe, or a run interrupted before it wrote one)."""
    existing = [path for path in paths if os.path.lexists(path)]
    if not existing:
        return
    owner = _run_id_of(sidecar)
    if owner == run_id:
        return
    writer = (f"run {owner}" if owner else
              "a run that left no resume sidecar: Caffe, or an interrupted run")
    LOG.warning(f"Overwriting {', '.join(existing)}, written by another run ({writer}); "
                "Caffe overwrites snapshots of the same name silently")


def _run_id_of(sidecar):
    """The run id a sidecar records, or None (absent, unreadable, not a sidecar)."""
    try:
        payload = parse_json(read_input_bytes(sidecar, "resume state", LIST_LIMIT))
    except (CaffeError, ValueError, RecursionError):
        return None
    run_id = payload.get("run_id") if isinstance(payload, dict) else None
    return run_id if isinstance(run_id, str) else None


# --- reading -----------------------------------------------------------------------------
class ResumeState(NamedTuple):
    """A checked sidecar: the run it continues, and (None when the run has another number of
    ranks) this rank's generator and layer states."""

    sidecar: str
    run_id: str
    rng: Optional[dict]
    train: Optional[dict]
    train_field: str
    tests: list


def check_resume_files(state_path, learned_net, weights_path, net, test_nets):
    """Check the snapshot's sidecar completely, before anything is restored.

    Args:
        state_path: the state file being resumed.
        learned_net: the weights file it names; weights_path: where that file was found
            (None: nowhere).
        net, test_nets: the nets being resumed, which the saved layer states must fit.

    Returns:
        A ResumeState; None (with a WARNING that resume is not exact) when there is no
        sidecar (Caffe's snapshots) or it was written by an earlier pycaffe.

    Raises:
        CaffeError: the sidecar is unreadable or a field is invalid, or the state or weights
            file is not the one the sidecar was written with (a mixed or interrupted unit).
    """
    sidecar = state_path + SIDECAR_SUFFIX
    if not os.path.lexists(sidecar):
        LOG.warning(f"No {sidecar}: {_NOT_EXACT}")
        return None
    payload = load_sidecar(sidecar)
    if payload["format"] == 1:
        LOG.warning(f"{sidecar} was written by an earlier pycaffe, which did not record the "
                    f"weights' SHA-256, and is ignored: {_NOT_EXACT}")
        return None
    _check_unit(payload, sidecar, state_path, learned_net, weights_path)
    resume = _this_ranks_part(payload, sidecar)
    if resume.train is not None:
        check_layers_match(resume.train, net, sidecar, resume.train_field)
        check_test_count(resume.tests, test_nets, sidecar)
        for i, (test_net, states) in enumerate(zip(test_nets, resume.tests)):
            check_layers_match(states, test_net, sidecar, f"test[{i}]")
    return resume


def _check_unit(payload, sidecar, state_path, learned_net, weights_path):
    """The state and weights files must be the very ones the sidecar was written with."""
    written_with = f"is not the one {sidecar} was written with (another SHA-256)"
    if _file_sha256(state_path, "solver state") != payload["state_sha256"]:
        problem = f"the state file {written_with}"
    elif weights_path is None:
        problem = f"its weights file {learned_net or '(none named)'} is missing"
    elif _file_sha256(weights_path, "weights file") != payload["weights_sha256"]:
        problem = f"its weights file {weights_path} {written_with}"
    else:
        return
    raise CaffeError(f"{state_path}: cannot resume from this snapshot: {problem}; its files "
                     "belong to different runs, or to a snapshot that was interrupted while it "
                     "replaced another: resume from an earlier snapshot")


def _this_ranks_part(payload, sidecar):
    """This rank's part of the sidecar (data-parallel training saves one entry per rank);
    without states, with a WARNING, when the run has another number of ranks."""
    saved = payload.get("solver_count", 1)
    count = backend.solver_setting("solver_count")
    rank = backend.solver_setting("solver_rank")
    if saved != count:
        LOG.warning(f"{sidecar} was saved by a run on {saved} process(es) and this one has "
                    f"{count}: {_NOT_EXACT}")
        return ResumeState(sidecar, payload["run_id"], None, None, "train", [])
    if rank == 0:
        return ResumeState(sidecar, payload["run_id"], payload["rng"], payload["train"],
                           "train", payload["test"])
    part = payload["ranks"][rank - 1]
    return ResumeState(sidecar, payload["run_id"], part["rng"], part["train"],
                       f"ranks[{rank - 1}].train", [])


def restore_resume_state(resume, net, test_nets):
    """Put back the generator and the layer states of a checked sidecar."""
    if resume.train is None:
        return
    try:
        backend.rng().bit_generator.state = resume.rng
    except (TypeError, ValueError, KeyError, OverflowError) as error:
        raise field_error(resume.sidecar, "rng", f"not a random generator state ({error})"
                          ) from None
    _set_layer_states(net, resume.train, resume.sidecar, resume.train_field)
    for i, (test_net, states) in enumerate(zip(test_nets, resume.tests)):
        _set_layer_states(test_net, states, resume.sidecar, f"test[{i}]")
    LOG.info(f"Restored random generator and data layer states from {resume.sidecar}")


def _set_layer_states(net, states, sidecar, field):
    for name, value in states.items():
        try:
            net.layer_by_name(name).set_state(value)
        except StateFieldError as error:
            raise field_error(sidecar, layer_field(field, name, error.field), str(error)
                              ) from None
        except CaffeError as error:
            raise field_error(sidecar, layer_field(field, name), str(error)) from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError,
                OverflowError) as error:
            raise field_error(sidecar, layer_field(field, name),
                              f"not a saved state of this layer ({type(error).__name__}: "
                              f"{error})") from None
