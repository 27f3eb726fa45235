"""Checks on a layer's saved state: the per-layer entries of the exact-resume sidecar.

``set_state`` receives whatever JSON gave back, of any type and size. These helpers check one
field each and raise ``StateFieldError`` naming the field inside the layer's state (``row``,
``rng.state.inc``); the sidecar reader puts the file, the net and the layer in front of it
(``r.solverstate.pycaffe.json: field "train["data"].row": ...``). A JSON boolean is not an
integer, and NaN, the infinities and integers too long to read are refused wherever they are.
"""
import math

from pycaffe_cli.errors import CaffeError

# Longer integer literals are kept as HugeNumber by the sidecar's JSON reader: Python refuses
# to convert more than 4300 digits, and the largest number a state holds has 39 (2 ** 128).
MAX_DIGITS = 60
# Bounds of the integers in a numpy PCG64 state (has_uint32 is a flag).
_GENERATOR_LIMITS = {"has_uint32": 2, "uinteger": 2 ** 32}
_DEFAULT_LIMIT = 2 ** 128
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", type(None): "null"}


class StateFieldError(CaffeError):
    """A field of a saved state is wrong; ``field`` is its path inside the state ("" for the
    whole state)."""

    def __init__(self, field, message):
        super().__init__(message)
        self.field = field


class HugeNumber:
    """An integer literal of more than MAX_DIGITS digits, kept unconverted."""

    def __init__(self, text):
        self.digits = len(text.lstrip("-"))


def parse_int(text):
    """``json.load``'s ``parse_int``: an int, or a HugeNumber for a very long literal."""
    return int(text) if len(text) <= MAX_DIGITS else HugeNumber(text)


def describe(value):
    """How a message shows a JSON value: "a boolean (true)", "a number (3.5)", "null", ..."""
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, HugeNumber):
        return f"a number of {value.digits} digits"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r:.60})"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def join(field, key):
    """The path of ``key`` inside ``field`` ("" is the top)."""
    if isinstance(key, int):
        return f"{field}[{key}]"
    return f"{field}.{key}" if field else key


def bad_number(value):
    """Why ``value`` is a number no saved state holds (NaN, an infinity, too many digits), or
    None."""
    if isinstance(value, HugeNumber):
        return f"a number of {value.digits} digits is out of range"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    return None


# --- one field each ------------------------------------------------------------------------
def state_object(state, keys, optional=(), field=""):
    """``state`` must be a JSON object with ``keys``, maybe ``optional``, and nothing else."""
    if not isinstance(state, dict):
        raise StateFieldError(field, f"must be an object, found {describe(state)}")
    for key in keys:
        if key not in state:
            raise StateFieldError(join(field, key), "missing")
    for key in state:
        if key not in keys and key not in optional:
            raise StateFieldError(join(field, key), "unexpected: not a field of this state")
    return state


def state_int(state, key, low, high, what=""):
    """``state[key]``: an integer with ``low <= value < high``; ``what`` explains the bound."""
    value = state[key]
    if type(value) is not int:
        raise StateFieldError(key, f"must be an integer, found {describe(value)}")
    if not low <= value < high:
        raise StateFieldError(key, f"must be between {low} and {high - 1}{what}, found {value}")
    return value


def state_permutation(state, key, size, what=""):
    """``state[key]``: the integers 0..size-1, each once, as a list."""
    value = state[key]
    if not isinstance(value, list) or len(value) != size:
        length = f" of {len(value)}" if isinstance(value, list) else ""
        raise StateFieldError(key, f"must be an array of the {size} indices 0..{size - 1}"
                                   f"{what}, found {describe(value)}{length}")
    seen = bytearray(size)
    for i, item in enumerate(value):
        if type(item) is not int:
            raise StateFieldError(join(key, i), f"must be an integer, found {describe(item)}")
        if not 0 <= item < size:
            raise StateFieldError(join(key, i), f"must be between 0 and {size - 1}{what}, "
                                                f"found {item}")
        if seen[item]:
            raise StateFieldError(join(key, i), f"{item} appears twice: not a permutation of "
                                                f"0..{size - 1}")
        seen[item] = 1
    return list(value)


def state_hex(state, key):
    """``state[key]``: bytes written as an even number of hex digits."""
    value = state[key]
    try:
        if not isinstance(value, str) or len(value) % 2:
            raise ValueError
        return bytes.fromhex(value)
    except ValueError:
        raise StateFieldError(key, f"must be a string of hex digits (bytes), found "
                                   f"{describe(value)}") from None


def state_generator(state, key, rng):
    """``state[key]``: the state of ``rng`` (a numpy Generator), or null when rng is None."""
    value = state[key]
    if rng is None:
        if value is not None:
            raise StateFieldError(key, f"must be null (this layer draws no random numbers "
                                       f"here), found {describe(value)}")
        return None
    check_generator_state(value, rng.bit_generator.state, key)
    return value


def check_generator_state(value, template, field):
    """Check a numpy bit generator state against ``template`` (one of the same kind): the
    same keys, the same generator name, non-negative integers within the type's range."""
    stack = [(value, template, field)]
    while stack:
        item, model, where = stack.pop()
        if isinstance(model, dict):
            if not isinstance(item, dict):
                raise StateFieldError(where, f"must be an object, found {describe(item)}")
            for key in model:
                if key not in item:
                    raise StateFieldError(join(where, key), "missing")
                stack.append((item[key], model[key], join(where, key)))
        elif isinstance(model, str):
            if item != model:
                raise StateFieldError(where, f"must be {model!r}, found {describe(item)}")
        else:
            limit = _GENERATOR_LIMITS.get(where.rsplit(".", 1)[-1], _DEFAULT_LIMIT)
            if type(item) is not int:
                raise StateFieldError(where, f"must be an integer, found {describe(item)}")
            if not 0 <= item < limit:
                raise StateFieldError(where, f"must be between 0 and {limit - 1}, found "
                                             f"{item}")
