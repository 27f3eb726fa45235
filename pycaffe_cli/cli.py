"""The ``pycaffe`` command: Caffe's ``caffe`` tool (tools/caffe.cpp) with a click front end.

``pycaffe <command> <flags>`` with Caffe's commands (train, test, time, device_query) and
flags. Flags take every gflags spelling: ``-solver x``, ``-solver=x``, ``--solver=x`` and
``--solver x``; the command word may also come after flags (``pycaffe -solver x train``), as
gflags allows. A user's mistake ends with one ``pycaffe: error: ...`` line and exit status 1
(2 for a malformed command line); anything else is a bug and keeps its traceback.
"""
import sys

import click

from pycaffe_cli.commands import FLAGS, USAGE_ORDER, all_commands, close_commands
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import setup_logging

PROG = "pycaffe"
EXIT_USER_ERROR = 1
EXIT_INTERRUPTED = 130

USAGE = f"""{PROG}: command line brew
usage: {PROG} <command> <args>

commands:
{{commands}}

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
            available = ", ".join(self.list_commands(ctx))
            raise click.UsageError(f'unknown action "{name}"{hint}; available actions: '
                                   f"{available}", ctx)
        return super().resolve_command(ctx, args)

    def format_help(self, ctx, formatter):
        lines = [f"  {name:<15} {self.get_command(ctx, name).short_help}"
                 for name in self.list_commands(ctx)]
        formatter.write(USAGE.format(commands="\n".join(lines)))


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
        out.append(arg)
    return _command_first(out)


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
            takes_value = arg.startswith("--") and "=" not in arg and arg[2:] in FLAGS
            i += 2 if takes_value else 1
            continue
        if i > 0 and arg in all_commands():
            return [arg] + args[:i] + args[i + 1:]
        break
    return args


def main(argv=None):
    """Run ``pycaffe`` on ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    setup_logging()
    try:
        return _run(normalize_argv(args))
    except CaffeError as error:
        _error_line(str(error))
        return EXIT_USER_ERROR
    except click.UsageError as error:
        _error_line(error.format_message())
        if error.ctx is not None:
            click.echo(f"Try '{error.ctx.command_path} --help' for help.", err=True)
        return error.exit_code
    except click.ClickException as error:
        _error_line(error.format_message())
        return error.exit_code
    except (KeyboardInterrupt, click.Abort):
        _error_line("interrupted")
        return EXIT_INTERRUPTED


def _run(args):
    if not args:
        args = ["--help"]
    try:
        with cli.make_context(PROG, args) as ctx:
            return cli.invoke(ctx) or 0
    except click.exceptions.Exit as done:
        return done.exit_code


def _error_line(message):
    message = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    click.echo(f"{PROG}: error: {message}", err=True)


if __name__ == "__main__":
    sys.exit(main())
