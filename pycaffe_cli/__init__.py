"""pycaffe: BVLC Caffe rebuilt in Python."""
import importlib.abc
import importlib.util
import os
import sys

# numba's OpenMP workers and OpenBLAS's workers both spin after each call by default, and on a
# small machine each stalls the other (docs/kernel-choices.md, "Threads that wait passively").
# These must be set before numpy loads OpenBLAS; a user's own settings win.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")


class _SourceFolders(importlib.abc.MetaPathFinder):
    """Finds ``pycaffe_cli.layers`` and ``pycaffe_cli.proto`` in the repository's top-level
    ``layers/`` and ``proto/`` folders, where setup.cfg maps them from. Installed, they sit
    inside this package and this finder is not used; it serves Python started in a source
    checkout's root (``python -m pytest``, ``python -c``), which imports this package from
    the folder rather than from the installation."""

    def __init__(self, root):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        prefix, _, child = name.partition(".")
        if prefix != __name__ or child not in ("layers", "proto"):
            return None
        folder = os.path.join(self.root, child)
        return importlib.util.spec_from_file_location(
            name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])


def _serve_source_folders():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if not os.path.isdir(os.path.join(here, "layers")) and os.path.isfile(
            os.path.join(root, "layers", "base.py")):
        sys.meta_path.insert(0, _SourceFolders(root))


_serve_source_folders()
