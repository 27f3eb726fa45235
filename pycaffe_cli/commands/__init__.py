"""The subcommands of ``pycaffe`` and the flags they share (Caffe's tools/caffe.cpp).

Caffe's flags are global gflags: every command accepts every flag and ignores the ones it does
not use. We keep that (shell scripts pass e.g. ``-weights`` to ``caffe time``): each command
shows its own flags in ``--help`` and takes the others hidden, with a warning when one is given.

A command registers itself with ``@subcommand("name", flags=(...), summary="...")``, the way
layers register their prototxt type. Caffe's other tools (convert_imageset, compute_image_mean)
are separate binaries with flags of their own and positional arguments; they register with
``arguments=("INPUT_DB", "[OUTPUT_FILE]")`` (brackets: optional) and ``own_flags={...}``.
Their flags belong to them alone; the global Caffe flags stay accepted (hidden) there too.
"""
import difflib
import functools
import importlib
import pkgutil

import click

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import path_problem, shown
from pycaffe_cli.log import LOG
from pycaffe_cli.signals import EFFECTS

EFFECT_CHOICES = EFFECTS

# Caffe's flags: name -> click.Option keyword arguments. Defaults are Caffe's.
FLAGS = {
    "solver": dict(default=None, metavar="FILE",
                   help="The solver definition protocol buffer text file."),
    "model": dict(default=None, metavar="FILE",
                  help="The model definition protocol buffer text file."),
    "weights": dict(default=None, metavar="FILES",
                    help="The pretrained weights to initialize finetuning, separated by ','. "
                         "Cannot be set simultaneously with snapshot."),
    "snapshot": dict(default=None, metavar="FILE",
                     help="The snapshot solver state to resume training."),
    "gpu": dict(default=None, metavar="IDS",
                help="Run in GPU mode on the given device IDs separated by ','; "
                     "'-gpu all' runs on all available GPUs."),
    "iterations": dict(default=50, type=click.IntRange(min=1), show_default=True,
                       help="The number of iterations to run."),
    "phase": dict(default=None, type=click.Choice(["TRAIN", "TEST"]),
                  help="Network phase (TRAIN or TEST). Only used for 'time'; default TRAIN."),
    "batch": dict(default=None, type=click.IntRange(min=1), metavar="N",
                  help="A pycaffe addition (Caffe has no such flag): run at batch size N, "
                       "set as the first axis of every Input shape (and legacy net input), "
                       "DummyData shape and data layer batch_size before the net is built. "
                       "Only used for 'time'; default: the prototxt's."),
    "inference_plan": dict(default=True, is_flag=True,
                           help="A pycaffe addition (Caffe has no such flag): run forward-only "
                                "nets ('test', and 'time' on a TEST net that needs no "
                                "backward) through an inference plan: BatchNorm/Scale/Bias "
                                "folded into the convolution before them, ReLU fused, blob "
                                "memory shared, Winograd for 3x3 convolutions; outputs within "
                                "the bounds docs/inference.md states. Off: every layer runs, "
                                "as in Caffe."),
    "level": dict(default=0, type=int, show_default=True, help="Network level."),
    "stage": dict(default=None, metavar="STAGES",
                  help="Network stages (not to be confused with phase), separated by ','."),
    "sigint_effect": dict(default="stop", type=click.Choice(EFFECT_CHOICES),
                          show_default=True,
                          help="Action to take when a SIGINT signal is received."),
    "sighup_effect": dict(default="snapshot", type=click.Choice(EFFECT_CHOICES),
                          show_default=True,
                          help="Action to take when a SIGHUP signal is received."),
    "threads": dict(default=None, type=click.IntRange(min=1), metavar="N",
                    help="A pycaffe addition (Caffe has no such flag): compute with N "
                         "threads, at most the pool's size (default: NUMBA_NUM_THREADS, "
                         "OMP_NUM_THREADS or OPENBLAS_NUM_THREADS where set, else the cores "
                         "this process may use)."),
}
# Flags every command takes and applies before it runs.
COMMON_FLAGS = ("threads",)

# Flags that name files; --weights lists several, separated by ",".
PATH_FLAGS = ("solver", "model", "weights", "snapshot")

COMMANDS = {}
# The flags of the tools (own_flags): name -> True for a boolean, False for one taking a value.
TOOL_FLAGS = {}
_loaded = []
# Caffe's usage text lists the commands in this order; the rest are its separate tools.
USAGE_ORDER = ("train", "test", "device_query", "time")


def subcommand(name, flags, summary, arguments=(), own_flags=None):
    """Register ``function(**flags)`` as the ``pycaffe <name>`` command.

    Args:
        name: the command word.
        flags: the names (keys of FLAGS) this command uses; they are passed as keyword
            arguments. Every other Caffe flag is accepted, hidden, and ignored with a warning.
        summary: the one-line description shown in ``pycaffe --help``.
        arguments: positional argument names, shown as written ("DB_NAME"); "[NAME]" is
            optional (None when not given). Passed as keyword arguments in lower case.
        own_flags: this command's own flags, name -> click.Option keyword arguments as in
            FLAGS; ``is_flag=True`` makes a gflags boolean (``--x``, ``--nox``, ``--x=false``).
    """
    own_flags = dict(own_flags or {})

    def decorate(function):
        if name in COMMANDS:
            raise RuntimeError(f"command {name!r} registered twice")
        _register_tool_flags(name, own_flags)
        ignored = [flag for flag in FLAGS if flag not in flags and flag not in COMMON_FLAGS]
        labels = {word.strip("[]").lower(): word.strip("[]") for word in arguments}

        @functools.wraps(function)
        def run(**values):
            check_flag_values(values, labels)
            _apply_common_flags(values)
            for flag in ignored:
                if values.pop(flag) not in (None, FLAGS[flag]["default"]):
                    LOG.warning(f"--{flag} is not used by '{name}'; ignored")
            return function(**values)

        command = click.Command(name, callback=run, help=function.__doc__,
                                short_help=summary, params=[])
        for flag in FLAGS:
            command.params.append(_option(flag, hidden=flag in ignored))
        command.params.extend(_own_option(flag, spec) for flag, spec in own_flags.items())
        command.params.extend(_argument(word) for word in arguments)
        COMMANDS[name] = command
        return function
    return decorate


def _apply_common_flags(values):
    """Take COMMON_FLAGS out of ``values`` and apply them."""
    threads = values.pop("threads", None)
    if threads is not None:
        from pycaffe_cli.threads import set_threads
        set_threads(threads)


def check_flag_values(values, labels=None):
    """Refuse flag values no file can have before anything runs: a NUL byte in any value (the
    argument vector of a real command line cannot hold one, but ``main([...])`` can), or a
    path flag naming an impossible path. The error names the flag (``--weights``) or the
    positional argument (``LISTFILE``, from ``labels``)."""
    labels = labels or {}
    for name, value in values.items():
        if not isinstance(value, str):
            continue
        where = labels.get(name, f"--{name}")
        if name not in PATH_FLAGS:
            if "\0" in value:
                raise CaffeError(f"{where} '{shown(value)}': the value contains a NUL byte")
            continue
        for part in value.split(","):
            problem = path_problem(part)
            if problem:
                raise CaffeError(f"{where} '{shown(part)}': {problem}")


def _option(flag, hidden):
    spec = dict(FLAGS[flag])
    if spec.pop("is_flag", False):  # a gflags boolean: --x, --nox (and --x=true/false)
        return click.Option([f"--{flag}/--no{flag}"], hidden=hidden, **spec)
    return click.Option([f"--{flag}"], hidden=hidden, **spec)


def _register_tool_flags(command, own_flags):
    for flag, spec in own_flags.items():
        boolean = bool(spec.get("is_flag"))
        if flag in FLAGS or TOOL_FLAGS.get(flag, boolean) != boolean:
            raise RuntimeError(f"flag --{flag} of {command!r} clashes with another flag")
        TOOL_FLAGS[flag] = boolean


def _own_option(flag, spec):
    spec = dict(spec)
    if spec.pop("is_flag", False):
        # gflags booleans: --x sets, --nox clears (--x=true/false is rewritten by the cli)
        return click.Option([f"--{flag}/--no{flag}"], **spec)
    return click.Option([f"--{flag}"], **spec)


def _argument(word):
    optional = word.startswith("[") and word.endswith("]")
    label = word.strip("[]")
    return click.Argument([label.lower()], metavar=word, required=not optional)


def value_flags():
    """Names of every flag that takes a value (the global ones and the tools')."""
    all_commands()
    return ({flag for flag, spec in FLAGS.items() if not spec.get("is_flag")}
            | {flag for flag, boolean in TOOL_FLAGS.items() if not boolean})


def boolean_flags():
    """Names of the tools' gflags booleans."""
    all_commands()
    return ({flag for flag, spec in FLAGS.items() if spec.get("is_flag")}
            | {flag for flag, boolean in TOOL_FLAGS.items() if boolean})


def all_commands():
    """Every registered command, importing the command modules on first use."""
    if not _loaded:
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
        _loaded.append(True)
    return COMMANDS


def close_commands(word):
    return difflib.get_close_matches(word, all_commands(), n=3, cutoff=0.6)


def split_list(value):
    """Caffe's comma-separated flag values; an empty or absent flag is an empty list."""
    return [item for item in (value or "").split(",") if item]
