"""Python: a layer whose computation is the user's own Python class (Caffe's PythonLayer).

``python_param { module: "my_layers" layer: "MyLayer" param_str: "..." }`` imports
``my_layers`` (from PYTHONPATH, or the working directory, which is added to the end of
``sys.path``) and instantiates ``MyLayer(layer_param)``. The class is written as for BVLC's
pycaffe and subclasses ``caffe.Layer`` (or, as before that existed, the engine's
``pycaffe_cli.layers.base.Layer``)::

    import caffe

    class MyLayer(caffe.Layer):
        def setup(self, bottom, top):          # once; read self.param_str, add self.blobs
            self.blobs.add_blob(1)             # a learnable blob of shape (1,), zeros
        def reshape(self, bottom, top):
            top[0].reshape(*bottom[0].data.shape)
        def forward(self, bottom, top):
            top[0].data[...] = bottom[0].data * self.blobs[0].data
        def backward(self, top, propagate_down, bottom):
            ...                                 # fill bottom[i].diff, accumulate blob diffs

The bottom and top blobs handed to the class behave like pycaffe's: ``data``/``diff`` numpy
arrays, ``shape``, ``count``, ``num``/``channels``/``height``/``width``, ``reshape(*shape)``
(``.blob`` is the underlying Blob). ``self.blobs`` lists the layer's learnable blobs as the
same views (with pycaffe's ``add_blob(*shape)``); they are updated by the solver and saved in
snapshots like any layer's. ``self.phase`` is ``caffe.TRAIN`` or ``caffe.TEST`` (a ``Phase``: an int
that prints as its name, so ``str(self.phase)`` is "TRAIN" or "TEST" as with BVLC's enum). The
parameter string is ``self.param_str``, also readable and writable under its older name
``self.param_str_`` (what py-faster-rcnn's layers read). Like any layer, a Python loss needs
``loss_weight`` in the prototxt (the default weight of a Python layer's top is 0).

An exception raised in the user's code becomes a CaffeError that names the layer and carries
the user's traceback. So does ``sys.exit(n)`` (SystemExit): "Python layer m.C called sys.exit(3)
in forward"; the command line then exits with status n (1 where n is 0, None or not a number:
a run cut short never reports success). Caffe's tool would exit with n without a word.
KeyboardInterrupt is left alone: it still means Ctrl-C.
"""
import importlib
import os
import sys
import traceback

from pycaffe_cli.blob import Blob
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.inference_hooks import InferenceHooks

MAX_FRAMES = 8


class Phase(int):
    """``caffe.TRAIN`` (0) and ``caffe.TEST`` (1) as BVLC's boost enum shows them: ints that
    compare and index as 0 and 1 and print as their names (``str(caffe.TRAIN) == "TRAIN"``,
    which py-faster-rcnn's layers use as a config key); ``name`` is that name too."""

    NAMES = ("TRAIN", "TEST")

    def __new__(cls, value):
        if isinstance(value, str):
            value = cls.NAMES.index(value.upper())
        value = int(value)
        if value not in (0, 1):
            raise ValueError(f"a phase is 0 (TRAIN) or 1 (TEST), not {value}")
        return super().__new__(cls, value)

    @property
    def name(self):
        return self.NAMES[self]

    def __str__(self):
        return self.name

    def __format__(self, spec):
        return format(self.name, spec) if not spec or spec[-1:] == "s" else int.__format__(
            self, spec)

    def __repr__(self):
        return f"caffe._caffe.Phase.{self.name}"

    def __reduce__(self):
        return Phase, (int(self),)


def _has_alias(impl, name):
    """Whether the user's class already maps ``name`` to ``param_str`` (caffe.Layer does)."""
    return isinstance(getattr(type(impl), name, None), property)


def _shape_of(args):
    """Accept pycaffe's ``reshape(2, 3)`` as well as ``reshape((2, 3))``."""
    if len(args) == 1 and hasattr(args[0], "__iter__"):
        return tuple(args[0])
    return tuple(args)


class PyBlob:
    """A Blob as BVLC's pycaffe shows it (``caffe.Blob``): to a Python layer (its bottoms, tops
    and ``self.blobs``) and through ``caffe.Net``. ``count`` is a property, ``reshape`` takes
    the dimensions as arguments, ``data``/``diff`` are writable numpy views of the blob's
    memory."""

    __slots__ = ("blob",)

    def __init__(self, blob):
        self.blob = blob

    @property
    def data(self):
        return self.blob.data

    @data.setter
    def data(self, value):
        self.blob.data[...] = value

    @property
    def diff(self):
        return self.blob.diff

    @diff.setter
    def diff(self, value):
        self.blob.diff[...] = value

    @property
    def shape(self):
        return self.blob.shape

    @property
    def count(self):
        return self.blob.count()

    num = property(lambda self: self.blob.num)
    channels = property(lambda self: self.blob.channels)
    height = property(lambda self: self.blob.height)
    width = property(lambda self: self.blob.width)

    def reshape(self, *shape):
        self.blob.reshape(_shape_of(shape))

    def __getattr__(self, name):
        return getattr(self.blob, name)

    def __repr__(self):
        return f"PyBlob({self.blob.shape_string()})"


class BlobVec(list):
    """``self.blobs`` of a Python layer: views (PyBlob) of the layer's learnable Blobs, with
    pycaffe's ``add_blob(*shape)``."""

    def add_blob(self, *shape):
        """Append a new zero-filled learnable blob of the given shape."""
        self.append(PyBlob(Blob(_shape_of(shape))))


def _wrap(blobs, cache):
    """PyBlob views of ``blobs``; a blob that is both a bottom and a top gets one view."""
    views = []
    for blob in blobs:
        if id(blob) not in cache:
            cache[id(blob)] = PyBlob(blob)
        views.append(cache[id(blob)])
    return views


def user_traceback(error):
    """The last frames of ``error``'s traceback below the frame that caught it (leaving out
    the import machinery), one line per frame so it stays readable when the command line
    prints the error on one line."""
    tb = error.__traceback__
    frames = [frame for frame in traceback.extract_tb(tb.tb_next if tb else None)
              if not frame.filename.startswith("<frozen importlib")][-MAX_FRAMES:]
    lines = ["Traceback (most recent call last):"]
    for frame in frames:
        code = f": {frame.line.strip()}" if frame.line else ""
        lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}{code}')
    return "\n".join(lines)


class PythonInferenceHooks(InferenceHooks):
    reshape_reads_values = True  # the user's code may (a proposal layer's box count, say)
    keeps_blob_views = True      # ... and may keep arrays of its blobs between calls


@register("Python")
class PythonLayer(Layer):
    """python_param: module, layer, param_str, share_in_parallel (ignored: one process)."""

    in_place_ok = True   # the user's code decides, as in Caffe
    inference_hooks = PythonInferenceHooks

    def __init__(self, param):
        super().__init__(param)
        p = param.python_param
        self.where = f"{p.module}.{p.layer}"
        cls = self._user_class(p.module, p.layer)
        self.impl = self._call(cls, "__init__", param)
        if getattr(self.impl, "type", None) is None:
            self.impl.type = "Python"   # what BVLC's net.layers[i].type says of it
        self._adopt_blobs()

    # --- finding and building the user's class ---------------------------------------------
    def _user_class(self, module_name, class_name):
        if not module_name or not class_name:
            raise self.error("python_param must name both the module and the layer (class)")
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        importlib.invalidate_caches()
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name and (module_name + ".").startswith(error.name + "."):
                raise self.error(f'cannot import the Python layer module "{module_name}": no '
                                 f'module named "{error.name}" on the Python path (PYTHONPATH '
                                 f"and the working directory {os.getcwd()})") from None
            raise self._user_error(f'importing module "{module_name}"', error) from error
        except Exception as error:  # the module's own code failed
            raise self._user_error(f'importing module "{module_name}"', error) from error
        except SystemExit as error:
            raise self._exit_error(f'module "{module_name}" at import', error) from None
        cls = getattr(module, class_name, None)
        if cls is None:
            where = getattr(module, "__file__", None) or module_name
            raise self.error(f'the Python layer module "{module_name}" ({where}) has no class '
                             f'"{class_name}"')
        return cls

    def _adopt_blobs(self):
        """The user's ``self.blobs`` (views) and this layer's learnable Blobs are one list.

        A class that set no ``self.blobs`` (``caffe.Layer`` subclasses) starts from the blobs
        given in the prototxt; engine Blobs the user put in the list are wrapped in views.
        """
        given = getattr(self.impl, "blobs", None)
        if given is None:
            given = self.blobs
        if not isinstance(given, list):
            raise self.error(f"the Python layer {self.where} set self.blobs to a "
                             f"{type(given).__name__}; it must stay a list of blobs (use "
                             "self.blobs.add_blob(*shape))")
        views = given if isinstance(given, BlobVec) else BlobVec(given)
        for i, item in enumerate(views):
            if isinstance(item, Blob):
                views[i] = PyBlob(item)
            elif not isinstance(item, PyBlob):
                raise self.error(f"the Python layer {self.where} put a {type(item).__name__} "
                                 "in self.blobs (use self.blobs.add_blob(*shape))")
        self.impl.blobs = views
        self.blobs = [view.blob for view in views]

    def _method(self, name):
        """The user's ``name`` method, or None where the class only inherits ours."""
        own = getattr(type(self.impl), name, None)
        if own is None or own is getattr(Layer, name, None):
            return None
        return getattr(self.impl, name)

    def _call(self, function, what, *args):
        try:
            return function(*args)
        except Exception as error:
            raise self._user_error(what, error) from error
        except SystemExit as error:
            raise self._exit_error(what, error) from None

    def _user_error(self, what, error):
        """A CaffeError naming the layer, with the user's traceback in its message and the
        user's exception in ``user_exception`` (``caffe.Net`` re-raises that one, as BVLC's
        pycaffe does)."""
        wrapped = self.error(f"Python layer {self.where}: {what} raised "
                             f"{type(error).__name__}: {error}\n{user_traceback(error)}")
        wrapped.user_exception = error
        return wrapped

    def _exit_error(self, what, error):
        """sys.exit() in the user's code, as a CaffeError naming the layer and the line that
        called it; ``user_exception`` is the SystemExit (the command line takes its code,
        ``caffe.Net`` re-raises it)."""
        frames = traceback.extract_tb(error.__traceback__)
        at = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        wrapped = self.error(f"Python layer {self.where} called sys.exit({error.code!r}) in "
                             f"{what}{at}")
        wrapped.user_exception = error
        return wrapped

    def _run(self, name, *args, required=True):
        method = self._method(name)
        if method is None:
            if required:
                raise self.error(f"the Python layer class {self.where} defines no {name}()")
            return
        self._call(method, name, *args)

    # --- the layer contract ------------------------------------------------------------------
    def layer_setup(self, bottom, top):
        self.impl.param_str = self.param.python_param.param_str
        if not _has_alias(self.impl, "param_str_"):   # a class not derived from caffe.Layer
            self.impl.param_str_ = self.impl.param_str
        self.impl.phase = Phase(self.phase)
        cache = {}
        self._run("setup", _wrap(bottom, cache), _wrap(top, cache), required=False)
        self._adopt_blobs()
        self.param_propagate_down = [True] * len(self.blobs)
        self.impl.param_propagate_down = self.param_propagate_down

    def reshape(self, bottom, top):
        cache = {}
        self._run("reshape", _wrap(bottom, cache), _wrap(top, cache))

    def forward_cpu(self, bottom, top):
        cache = {}
        self._run("forward", _wrap(bottom, cache), _wrap(top, cache))

    def backward_cpu(self, top, propagate_down, bottom):
        cache = {}
        self._run("backward", _wrap(top, cache), list(propagate_down), _wrap(bottom, cache))
