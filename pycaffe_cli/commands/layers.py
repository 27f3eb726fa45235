"""``pycaffe layers``: list the registered layer types (not a Caffe command; handy in scripts)."""
import click

from pycaffe_cli.commands import subcommand
from pycaffe_cli.layers.base import registered_types


@subcommand("layers", flags=(), summary="list the layer types this pycaffe can build")
def layers():
    """Print every registered prototxt layer type, one per line, sorted."""
    for name in registered_types():
        click.echo(name)
    return 0
