"""Views of flat device arrays that skip slicing where it would change nothing.

Slicing a numba device array runs tens of microseconds of Python (numba builds a new
array description each time), and GPU mode takes several views a layer: a blob's first
``count`` values, a group's weights from its offset, a grown buffer's first ``size`` values.
Most of them cover the whole array (a blob holds exactly its count; a one-group layer starts
at 0), and then the array itself is the view. Like launch.py, this module imports no CUDA.
"""


def first(array, count):
    """The first ``count`` values of the flat device array ``array``."""
    return array if array.shape[0] == count else array[:count]


def starting_at(array, start):
    """The flat device array ``array`` from ``start`` on."""
    return array if start == 0 else array[start:]
