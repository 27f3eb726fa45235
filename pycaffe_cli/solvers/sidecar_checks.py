"""Reading and checking a ``.pycaffe.json`` resume sidecar, field by field.

Every failure is one line naming the file and the field's path:
``r.solverstate.pycaffe.json: field "train["data"].row": must be between 0 and 9, found 12``.
Layer names are quoted (they may hold dots); ``test[0]`` is the first test net's layers and
``ranks[0]`` rank 1's part in data-parallel training. The layers check their own fields in
``set_state`` (state_fields.py); here the file's shape is checked, the numbers anywhere
in it (no NaN, infinity or huge literal), the generator states, and that the sidecar saved
exactly the stateful layers of the nets being resumed, one entry per test net.
"""
import json
import re

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import LIST_LIMIT, read_input_bytes
from pycaffe_cli.solvers.state_checks import field_error
from pycaffe_cli.state_fields import (StateFieldError, bad_number, check_generator_state,
                                      describe, join, parse_int)

SIDECAR_FORMAT = 2
# Format 1 (pycaffe before the weights were bound to the state): read, checked, not restored.
KNOWN_FORMATS = (1, SIDECAR_FORMAT)
_REQUIRED = ("format", "rng", "train", "test")
_BINDING = ("run_id", "weights_sha256", "state_sha256")
_HEX = {"run_id": re.compile(r"[0-9a-f]{32}"), "weights_sha256": re.compile(r"[0-9a-f]{64}"),
        "state_sha256": re.compile(r"[0-9a-f]{64}")}


def layer_field(net_field, name, inner=""):
    """``train["data"].row``: the path of field ``inner`` of layer ``name``'s state."""
    path = f"{net_field}[{json.dumps(name)}]"
    if not inner:
        return path
    return path + inner if inner.startswith("[") else f"{path}.{inner}"


def parse_json(data):
    """Decode a sidecar's bytes; huge integer literals come back as HugeNumber."""
    return json.loads(data, parse_int=parse_int)


def load_sidecar(sidecar):
    """Read and check a sidecar file; return its payload (a dict)."""
    data = read_input_bytes(sidecar, "resume state", LIST_LIMIT)   # never a pipe or a device
    try:
        payload = parse_json(data)
    except (ValueError, RecursionError) as error:
        raise CaffeError(f"{sidecar}: cannot read the resume state ({error})") from None
    check_sidecar(payload, sidecar)
    return payload


def check_sidecar(payload, sidecar):
    """Raise CaffeError naming the field unless ``payload`` is a well-formed sidecar."""
    if not isinstance(payload, dict):
        raise CaffeError(f"{sidecar}: not a pycaffe resume state: expected a JSON object, "
                         f"found {describe(payload)}")
    for field in _REQUIRED:
        if field not in payload:
            raise field_error(sidecar, field, "missing")
    version = payload["format"]
    if type(version) is not int or version not in KNOWN_FORMATS:
        raise field_error(sidecar, "format", f"unknown resume-state format {_shown(version)} "
                                             f"(this pycaffe reads format {SIDECAR_FORMAT})")
    template = backend.rng().bit_generator.state
    _checked(sidecar, check_generator_state, payload["rng"], template, "rng")
    _check_layer_states(payload["train"], sidecar, "train")
    tests = payload["test"]
    if not isinstance(tests, list):
        raise field_error(sidecar, "test", f"must be an array, found {describe(tests)}")
    for i, states in enumerate(tests):
        _check_layer_states(states, sidecar, f"test[{i}]")
    _check_ranks(payload, sidecar, template)
    _check_binding(payload, sidecar)


def _shown(value):
    return value if type(value) is int else describe(value)


def _checked(sidecar, check, *args):
    try:
        check(*args)
    except StateFieldError as error:
        raise field_error(sidecar, error.field, str(error)) from None


def _check_binding(payload, sidecar):
    """run_id, weights_sha256 and state_sha256: required from format 2 on."""
    for field in _BINDING:
        if field not in payload:
            if payload["format"] == 1:
                continue
            raise field_error(sidecar, field, "missing")
        value = payload[field]
        if not isinstance(value, str) or not _HEX[field].fullmatch(value):
            digits = 32 if field == "run_id" else 64
            raise field_error(sidecar, field, f"must be {digits} lowercase hex digits, found "
                                              f"{describe(value)}")


def _check_ranks(payload, sidecar, template):
    """"solver_count" and "ranks" (data-parallel runs): N and N - 1 rank entries."""
    count = payload.get("solver_count", 1)
    if type(count) is not int or not 1 <= count <= 1 << 16:
        raise field_error(sidecar, "solver_count", f"must be a positive integer, found "
                                                   f"{describe(count)}")
    ranks = payload.get("ranks", [])
    if not isinstance(ranks, list) or len(ranks) != count - 1:
        raise field_error(sidecar, "ranks", f"must be an array of {count - 1} rank state(s) "
                                            f"(solver_count is {count})")
    for i, entry in enumerate(ranks):
        if not isinstance(entry, dict) or "rng" not in entry or "train" not in entry:
            raise field_error(sidecar, f"ranks[{i}]", "must be an object with rng and train")
        _checked(sidecar, check_generator_state, entry["rng"], template, f"ranks[{i}].rng")
        _check_layer_states(entry["train"], sidecar, f"ranks[{i}].train")


def _check_layer_states(states, sidecar, field):
    """A {layer name: state} object: no bad number anywhere, generator states well formed."""
    if not isinstance(states, dict):
        raise field_error(sidecar, field, f"must be an object, found {describe(states)}")
    template = backend.rng().bit_generator.state
    stack = [(value, layer_field(field, name)) for name, value in states.items()]
    while stack:
        item, where = stack.pop()
        problem = bad_number(item)
        if problem:
            raise field_error(sidecar, where, problem)
        if isinstance(item, dict):
            if item.get("bit_generator") == template["bit_generator"]:
                _checked(sidecar, check_generator_state, item, template, where)
                continue
            stack.extend((v, join(where, k)) for k, v in item.items())
        elif isinstance(item, list) and not all(type(v) is int for v in item):
            stack.extend((v, join(where, i)) for i, v in enumerate(item))


def check_layers_match(states, net, sidecar, field):
    """The sidecar saved a state for exactly the layers of ``net`` that have one: a layer the
    net lacks, or a stateful layer it did not save, means it was written for another net."""
    for name in states:
        if not net.has_layer(name):
            raise field_error(sidecar, layer_field(field, name),
                              f'net "{net.name}" has no layer of this name: the resume state '
                              f"was saved for another net")
    for name, layer in zip(net.layer_names, net.layers):
        if name not in states and layer.get_state() is not None:
            raise field_error(sidecar, layer_field(field, name),
                              f'missing: layer "{name}" of net "{net.name}" keeps a state '
                              f"(a data position) that the resume state does not hold; it "
                              f"was saved for another net")


def check_test_count(tests, test_nets, sidecar):
    if len(tests) != len(test_nets):
        raise field_error(sidecar, "test", f"holds {len(tests)} test net state(s); this "
                                           f"solver has {len(test_nets)} test net(s): the "
                                           "resume state was saved for another solver")
