"""The ``pycaffe`` command: Caffe's ``caffe`` tool (tools/caffe.cpp) with a click front end.

``pycaffe <command> <flags>`` with Caffe's commands (train, test, time, device_query) and
flags, and Caffe's data tools (``pycaffe convert_imageset ...``, ``compute_image_mean``) with
theirs. Flags take every gflags spelling: ``-solver x``, ``-solver=x``, ``--solver=x`` and
``--solver x``; booleans also ``-gray``, ``--gray=true``, ``--gray=false``, ``--nogray``. The
command word may also come after flags (``pycaffe -solver x train``), as gflags allows. A
user's mistake ends with one ``pycaffe: error: ...`` line and exit status 1 (2 for a malformed
command line); anything else is a bug and keeps its traceback.
"""
import os
import signal
import sys
import warnings

import click

from pycaffe_cli.commands import (USAGE_ORDER, all_commands, boolean_flags, close_commands,
                                  value_flags)
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import setup_logging

PROG = "pycaffe"
EXIT_USER_ERROR = 1
EXIT_INTERRUPTED = 130
# What a shell reports for a program that SIGPIPE ended (128 + 13), as it reports for Caffe.
EXIT_BROKEN_PIPE = 128 + getattr(signal, "SIGPIPE", 13)

USAGE = f"""{PROG}: command line brew
usage: {PROG} <command> <args>

commands:
{{commands}}
{{tools}}
Flags take any gflags spelling: -solver x, -solver=x, --solver=x, --solver x.
Run '{PROG} <command> --help' for a command's flags.
"""


class BrewGroup(click.Group):
    """The command group: Caffe's usage text and its "Unknown action" error."""

    def list_commands(self, ctx):
        known = all_commands()
        return [n for n in USAGE_ORDER if n in known] + sorted(set(known) - set(USAGE_ORDER))

    def get_command(self, ctx, name):
        return all_commands().get(name)

    def resolve_command(self, ctx, args):
        name = args[0]
        if self.get_command(ctx, name) is None and not name.startswith("-"):
            close = close_commands(name)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            # Caffe's `caffe` actions; the tools are in the usage text (and in did-you-mean)
            available = ", ".join(n for n in self.list_commands(ctx) if n in USAGE_ORDER)
            raise click.UsageError(f'unknown action "{name}"{hint}; available actions: '
                                   f"{available}", ctx)
        return super().resolve_command(ctx, args)

    def format_help(self, ctx, formatter):
        names = self.list_commands(ctx)
        commands = [name for name in names if name in USAGE_ORDER]
        tools = [name for name in names if name not in USAGE_ORDER]
        width = max([15] + [len(name) for name in tools])
        lines = [f"  {name:<15} {self.get_command(ctx, name).short_help}" for name in commands]
        tool_lines = [f"  {name:<{width}} {self.get_command(ctx, name).short_help}"
                      for name in tools]
        tool_text = "\ntools:\n" + "\n".join(tool_lines) + "\n" if tools else ""
        formatter.write(USAGE.format(commands="\n".join(lines), tools=tool_text))


cli = BrewGroup(PROG, context_settings={"help_option_names": ["-h", "--help"]})


def normalize_argv(args):
    """Rewrite gflags spellings into the ones click parses, and put the command first.

    ``-solver x`` / ``-solver=x`` become ``--solver x`` / ``--solver=x``; so does any other
    single-dash word (``-solvr``), so that click names it whole and suggests the flag that
    was meant (``-h`` stays click's short help option). The first word that is neither a
    flag nor a flag's value, when it names a command, moves to the front. Everything after
    ``--`` is left alone.
    """
    out = []
    for i, arg in enumerate(args):
        if arg == "--":
            out.extend(args[i:])
            break
        if _is_gflags_word(arg):
            arg = "-" + arg
        out.append(_boolean_value(arg))
    return _command_first(out)


_TRUE = ("true", "t", "yes", "y", "1")
_FALSE = ("false", "f", "no", "n", "0")


def _boolean_value(arg):
    """gflags' ``--gray=true`` / ``--gray=false`` as click's ``--gray`` / ``--nogray``."""
    if not arg.startswith("--") or "=" not in arg:
        return arg
    name, value = arg[2:].split("=", 1)
    if name not in boolean_flags():
        return arg
    if value.lower() in _TRUE:
        return f"--{name}"
    if value.lower() in _FALSE:
        return f"--no{name}"
    return arg


def _is_gflags_word(arg):
    name = arg[1:].split("=", 1)[0]
    return (arg.startswith("-") and not arg.startswith("--") and len(name) > 1
            and name.replace("_", "a").isalnum() and name[0].isalpha())


def _command_first(args):
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg.startswith("-") and len(arg) > 1:
            takes_value = arg.startswith("--") and "=" not in arg and arg[2:] in value_flags()
            i += 2 if takes_value else 1
            continue
        if i > 0 and arg in all_commands():
            return [arg] + args[:i] + args[i + 1:]
        break
    return args


# numpy's floating-point warnings ("RuntimeWarning: invalid value encountered in matmul" and
# a source line) would reach the user where one WARNING already names the file or the layer
# (weights and mean files, commands/non_finite.py, solvers/divergence.py). The filter is
# global, so the prefetch threads are quiet too, and lasts only while main() runs.
_NUMPY_FLOAT_WARNINGS = r"(invalid value|overflow|divide by zero|underflow) encountered"


def main(argv=None):
    """Run ``pycaffe`` on ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    setup_logging()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _NUMPY_FLOAT_WARNINGS, RuntimeWarning)
        try:
            return _main(args)
        except BrokenPipeError:
            # The reader of stdout or stderr has gone (`pycaffe layers | head -1`): stop
            # without a word, as Caffe and other Unix tools do when SIGPIPE ends them.
            _drop_broken_streams()
            return EXIT_BROKEN_PIPE


def _main(args):
    """main() without the broken-pipe handling: run, and turn errors into exit codes."""
    try:
        return _run(normalize_argv(args))
    except CaffeError as error:
        _error_line(str(error))
        return _exit_status(error)
    except click.UsageError as error:
        _error_line(error.format_message())
        if error.ctx is not None:
            click.echo(f"Try '{error.ctx.command_path} --help' for help.", err=True)
        return error.exit_code
    except click.ClickException as error:
        _error_line(error.format_message())
        return error.exit_code
    except MemoryError as error:
        # what no layer caught (layers name themselves: pycaffe_cli/sizes.py)
        _error_line(f"out of memory ({error or 'MemoryError'})")
        return EXIT_USER_ERROR
    except (KeyboardInterrupt, click.Abort):
        _error_line("interrupted")
        return EXIT_INTERRUPTED


def _exit_status(error):
    """1, or the status a Python layer passed to sys.exit() where that is 1 to 255 (a run cut
    short by sys.exit(0) must not look like a success)."""
    user = getattr(error, "user_exception", None)
    if isinstance(user, SystemExit) and isinstance(user.code, int) and 0 < user.code < 256:
        return user.code
    return EXIT_USER_ERROR


def _run(args):
    if not args:
        args = ["--help"]
    try:
        with cli.make_context(PROG, args) as ctx:
            return cli.invoke(ctx) or 0
    except click.exceptions.Exit as done:
        return done.exit_code


def _drop_broken_streams():
    """Point stdout and stderr at /dev/null where their pipe is closed, so that Python's own
    flush at exit does not complain ("Exception ignored ... BrokenPipeError")."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
            except (OSError, ValueError, AttributeError):
                pass


def _error_line(message):
    message = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    click.echo(f"{PROG}: error: {message}", err=True)


if __name__ == "__main__":
    sys.exit(main())
