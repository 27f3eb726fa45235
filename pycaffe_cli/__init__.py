"""pycaffe: BVLC Caffe rebuilt in Python."""
import importlib.abc
import importlib.util
import os
import sys

from pycaffe_cli import threads

# One pool of threads, sized to the usable cores (pycaffe_cli/threads.py): numba reads these
# when it loads. numpy's OpenBLAS threads, should anything call it, sleep at once after each
# product instead of spinning beside numba's (docs/kernel-choices.md, "Threads that wait
# passively"). A user's own settings win.
threads.prepare_environment()
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
