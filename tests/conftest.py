"""Import pycaffe_cli before any test module imports numpy, so its thread settings apply."""
import pycaffe_cli  # noqa: F401
