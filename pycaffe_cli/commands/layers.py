"""``pycaffe layers``: list the registered layer types (not a Caffe command; handy in scripts)."""
import click

from pycaffe_cli.commands import subcommand
from pycaffe_cli.layers.base import layer_class, registered_types


@subcommand("layers", flags=(), summary="list the layer types this pycaffe can build")
def layers():
    """Print every registered prototxt layer type, one per line, sorted; a type from another
    Caffe fork is followed by a tab and the fork (``PriorBox<TAB>from SSD's Caffe fork ...``)."""
    for name in registered_types():
        fork = layer_class(name).fork
        click.echo(f"{name}\tfrom {fork}" if fork else name)
    return 0
