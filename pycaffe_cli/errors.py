"""User-facing errors.

Anything a user can cause (a bad prototxt, a missing file, a shape mismatch) raises
``CaffeError``; the command line prints its message as one line and exits non-zero. Any
other exception is a bug in pycaffe and keeps its traceback.
"""


class CaffeError(Exception):
    """A mistake in the user's input, reported as one line without a traceback.

    Attributes:
        layer: the name of the layer the error belongs to, when there is one, so that callers
            that know the prototxt file can point at the layer's line.
    """

    def __init__(self, message, layer=None):
        super().__init__(message)
        self.layer = layer


def located(error, where):
    """``error`` (a CaffeError) with ``where`` (a file, or file:line) put in front, keeping
    the layer and, for a Python layer's failure, the user's own exception."""
    moved = CaffeError(f"{where}: {error}", layer=error.layer)
    moved.user_exception = getattr(error, "user_exception", None)
    return moved


def layer_error(layer_name, message):
    """Return a CaffeError that names the layer the problem belongs to."""
    return CaffeError(f'layer "{layer_name}": {message}', layer=layer_name)


def check(condition, message):
    """Raise CaffeError(message) unless condition holds (Caffe's CHECK for user input)."""
    if not condition:
        raise CaffeError(message)
