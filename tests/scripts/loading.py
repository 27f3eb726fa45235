"""Importing a file of scripts/ (not a package) as a module, for its tests."""
import importlib.machinery
import importlib.util
import pathlib

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"


def load_script(name):
    """scripts/<name>.py, or scripts/<name> where the script has no suffix (bench), as a
    module named ``script_<name>``."""
    path = SCRIPTS / f"{name}.py"
    if not path.exists():
        path = SCRIPTS / name
    loader = importlib.machinery.SourceFileLoader(f"script_{name}", str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module
