"""How the Python interface reports mistakes: dictionaries whose missing keys say what the net
does have, and the user's own exception (not the engine's wrapper) out of a Python layer."""
import contextlib
from collections import OrderedDict

from pycaffe_cli.errors import CaffeError


class NamedDict(OrderedDict):
    """An OrderedDict whose KeyError names what was looked up, in which net, and the names
    it has."""

    def __init__(self, what, net_name, items=()):
        super().__init__(items)
        self._what = what
        self._net_name = net_name

    def __missing__(self, key):
        known = ", ".join(repr(k) for k in list(self)[:20])
        more = ", ..." if len(self) > 20 else ""
        raise KeyError(f"net {self._net_name!r} has no {self._what} named {key!r} "
                       f"(it has {known}{more})")

    def __reduce__(self):
        return (OrderedDict, (list(self.items()),))


@contextlib.contextmanager
def raising_user_errors():
    """Re-raise an exception a Python layer's own code raised as itself (BVLC's pycaffe hands
    it back through C++ unchanged); every other CaffeError stays as it is."""
    try:
        yield
    except CaffeError as error:
        original = getattr(error, "user_exception", None)
        if original is None:
            raise
        raise original from None
