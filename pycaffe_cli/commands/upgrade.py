"""``pycaffe upgrade_net_proto_text``, ``upgrade_net_proto_binary``, ``upgrade_solver_proto_text``:
Caffe's tools/upgrade_*_proto_*.cpp.

Each reads INPUT_FILE, upgrades it with the engine's upgrade steps (the same log lines the
loaders print), logs "File already in latest proto format" at ERROR level when there was
nothing to do (as Caffe does), writes OUTPUT_FILE atomically and exits as Caffe's tools do:
0 on success, 1 when an upgrade step reported problems (the file is written anyway), 2 when
INPUT_FILE does not parse as the message. Unlike Caffe, a missing or unreadable input, an
unwritable output, or an upgrade the engine refuses (formats mixed so that layers would be
lost) ends with one error line and exit status 1, leaving no output file.
"""
import contextlib
import logging
import os

import click

from pycaffe_cli.commands import subcommand
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import PROTO_LIMIT, PROTOTXT_LIMIT, check_input_file, shown
from pycaffe_cli.io.prototxt import (read_net_param, read_net_param_binary, read_solver_param,
                                     write_binary_proto, write_text_proto)
from pycaffe_cli.io.upgrade import net_needs_upgrade, upgrade_net, upgrade_solver
from pycaffe_cli.log import LOG

EXIT_PROBLEMS = 1
ARGUMENTS = ("INPUT_FILE", "OUTPUT_FILE")


class ParseFailure(click.ClickException):
    """INPUT_FILE is not the message the tool upgrades; Caffe's tools return 2 then."""
    exit_code = 2


@subcommand("upgrade_net_proto_text", flags=(), arguments=ARGUMENTS,
            summary="upgrade a V0/V1 net prototxt to the current format")
def upgrade_net_proto_text(input_file, output_file):
    """Upgrade a net prototxt (V0 layers, V1 'layers', input fields, old data transformation
    and BatchNorm params) to the current format and write it to OUTPUT_FILE."""
    param = _read(input_file, read_net_param, "text", "NetParameter", PROTOTXT_LIMIT)
    upgraded, success = _upgrade(input_file, param, net_needs_upgrade, upgrade_net)
    write_text_proto(output_file, upgraded)
    LOG.info(f"Wrote upgraded NetParameter text proto to {output_file}")
    return 0 if success else EXIT_PROBLEMS


@subcommand("upgrade_net_proto_binary", flags=(), arguments=ARGUMENTS,
            summary="upgrade a V0/V1 binary net (.caffemodel) to the current format")
def upgrade_net_proto_binary(input_file, output_file):
    """Upgrade a binary NetParameter (an old .caffemodel) to the current format, keeping
    every layer's learned blobs, and write it to OUTPUT_FILE."""
    param = _read(input_file, read_net_param_binary, "binary", "NetParameter", PROTO_LIMIT)
    upgraded, success = _upgrade(input_file, param, net_needs_upgrade, upgrade_net)
    write_binary_proto(output_file, upgraded)
    LOG.info(f"Wrote upgraded NetParameter binary proto to {output_file}")
    return 0 if success else EXIT_PROBLEMS


@subcommand("upgrade_solver_proto_text", flags=(), arguments=ARGUMENTS,
            summary="upgrade a solver prototxt (solver_type enum -> type)")
def upgrade_solver_proto_text(input_file, output_file):
    """Upgrade a solver prototxt (the 'solver_type' enum becomes the 'type' string) and
    write it to OUTPUT_FILE."""
    param = _read(input_file, read_solver_param, "text", "SolverParameter", PROTOTXT_LIMIT)
    upgraded, success = _upgrade(input_file, param, _solver_needs_upgrade, upgrade_solver)
    write_text_proto(output_file, upgraded)
    LOG.info(f"Wrote upgraded SolverParameter text proto to {output_file}")
    return 0 if success else EXIT_PROBLEMS


def _solver_needs_upgrade(param):
    return param.HasField("solver_type")


def _read(path, reader, form, message, limit):
    """Read ``path`` with ``reader``. A file that cannot be read is a CaffeError (status 1);
    one that can but does not parse is a ParseFailure (status 2)."""
    what = f"{form} input file"
    check_input_file(path, what, limit)
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise CaffeError(f"cannot read {what} '{shown(path)}': "
                         f"{error.strerror or error}") from None
    try:
        return reader(path)
    except CaffeError as error:
        raise ParseFailure(f"Failed to parse input {form} file as {message}: {error}") from None


def _upgrade(source, param, needs_upgrade, upgrade):
    """``(upgraded param, success)``, success being False when an upgrade step logged an error.

    The engine's upgrades report what they could not carry over as ERROR log lines and go
    on, as Caffe's UpgradeNetAsNeeded does; Caffe's tools turn that into their exit status.
    """
    if not needs_upgrade(param):
        LOG.error(f"File already in latest proto format: {source}")
        return param, True
    with _counting_errors() as errors:
        upgraded = upgrade(param, source=os.fspath(source))
    if errors.count:
        LOG.error("Encountered error(s) while upgrading prototxt; see details above.")
    return upgraded, errors.count == 0


class _ErrorCounter(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.count = 0

    def emit(self, record):
        self.count += 1


@contextlib.contextmanager
def _counting_errors():
    counter = _ErrorCounter()
    LOG.addHandler(counter)
    try:
        yield counter
    finally:
        LOG.removeHandler(counter)
