"""Importing a file of scripts/ (not a package) as a module, for its tests."""
import importlib.util
import pathlib

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"


def load_script(name):
    """scripts/<name>.py as a module named ``script_<name>``."""
    spec = importlib.util.spec_from_file_location(f"script_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
