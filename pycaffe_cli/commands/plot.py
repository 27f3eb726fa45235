"""``pycaffe plot``: training curves from Caffe's and pycaffe's logs (in the spirit of Caffe's
tools/extra/plot_training_log.py.example, which draws one chart type per call).

One figure with up to three panels, stacked: the losses (every train and test output whose
name contains "loss"), the other outputs (accuracy, top-5, ...), and the learning rate, each
against iterations or, with ``--x seconds``, against seconds since the "Solving" line. Every
log gives its own lines, labelled with the log's file name. The logs are read by parse_log's
parser, so the numbers are those of the CSV files ``pycaffe parse_log`` writes.

matplotlib is an optional dependency (``pip install 'pycaffe[plot]'``); the figure is drawn
on matplotlib's Agg canvas without pyplot, so no display and no global state are involved.
"""
import math
import os
from collections import Counter

import click

from pycaffe_cli.commands import COMMANDS, subcommand
from pycaffe_cli.commands.parse_log import FIXED_COLUMNS, TrainingLog, parse_log
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.io.input_files import shown
from pycaffe_cli.log import LOG

WIDTH_INCHES = 10.0
PANEL_HEIGHT_INCHES = 3.5
DPI = 100
X_COLUMNS = {"iterations": ("NumIters", "Iterations"), "seconds": ("Seconds", "Seconds")}
NEEDS_MATPLOTLIB = "pycaffe plot needs matplotlib: pip install 'pycaffe[plot]'"

TOOL_FLAGS = {
    "x": dict(default="iterations", show_default=True, type=click.Choice(list(X_COLUMNS)),
              help="What the horizontal axis shows."),
}


@subcommand("plot", flags=(), summary="plot loss, accuracy and learning rate from training logs",
            own_flags=TOOL_FLAGS)
def plot_command(paths, x):
    """Draw the losses, the other net outputs (accuracy, ...) and the learning rate of one or
    more training logs (Caffe's or pycaffe's) into OUT (.png, .pdf, .svg, ...): one line per
    log and output, against iterations or, with --x seconds, against seconds."""
    if len(paths) < 2:
        raise click.UsageError("give at least one LOG and the OUT image file")
    *log_paths, out = paths
    image_format = output_format(out)
    logs = [parse_log(path) for path in log_paths]
    figure = draw(logs, x)
    save_figure(figure, out, image_format)
    LOG.info(f"Wrote {out}")
    return 0


# The registry's ``arguments=`` names fixed positional words; LOG [LOG ...] OUT is variadic.
COMMANDS["plot"].params.append(
    click.Argument(["paths"], nargs=-1, metavar="LOG [LOG ...] OUT"))


def _matplotlib():
    """matplotlib's Figure and Agg canvas classes, or the one-line error saying how to get
    them."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise CaffeError(NEEDS_MATPLOTLIB) from None
    return Figure, FigureCanvasAgg


def output_format(path):
    """The image format named by ``path``'s extension. A name without a known image
    extension is refused: ``pycaffe plot a.log b.log`` must not write over b.log."""
    figure_class, canvas_class = _matplotlib()
    supported = canvas_class(figure_class()).get_supported_filetypes()
    extension = os.path.splitext(os.fspath(path))[1][1:].lower()
    if extension not in supported:
        raise CaffeError(f"OUT '{shown(path)}': not an image file name; end it in one of "
                         + ", ".join(f".{name}" for name in sorted(supported)))
    return extension


def draw(logs, x="iterations"):
    """A matplotlib Figure of the TrainingLogs ``logs``: panels "loss", "accuracy" (every
    other output) and "learning rate", those that have lines, each with one line per log and
    output.

    Raises:
        CaffeError: no log has any train or test output; matplotlib is missing.
    """
    figure_class, canvas_class = _matplotlib()
    x_column, x_label = X_COLUMNS[x]
    names = _labels(logs)
    panels = _panels(logs, names, x_column)
    if not panels:
        raise CaffeError("no 'Train net output' or 'Test net output' lines in "
                         + ", ".join(f"'{shown(log.path)}'" for log in logs))
    for log in logs:
        if not log.train and not log.test:
            LOG.warning(f"{log.path}: no 'Train net output' or 'Test net output' lines")
    figure = figure_class(figsize=(WIDTH_INCHES, PANEL_HEIGHT_INCHES * len(panels)), dpi=DPI,
                          layout="constrained")
    canvas_class(figure)
    axes_list = figure.subplots(len(panels), 1, squeeze=False)[:, 0]
    for axes, (title, lines) in zip(axes_list, panels):
        _draw_panel(axes, title, lines, x_label)
    return figure


def _labels(logs):
    """Each log's name in legends: its file name, or the path as given where two logs
    share a file name."""
    counts = Counter(os.path.basename(log.path) for log in logs)
    return [os.path.basename(log.path) if counts[os.path.basename(log.path)] == 1
            else log.path for log in logs]


def _panels(logs, names, x_column):
    """[(title, [(label, xs, ys, dashed), ...]), ...] for the panels that have lines."""
    losses, others, rates = [], [], []
    for log, name in zip(logs, names):
        for phase, rows in (("train", log.train), ("test", log.test)):
            for column in TrainingLog.columns(rows):
                if column in FIXED_COLUMNS:
                    continue
                line = (f"{name} {phase} {column}", *_series(rows, x_column, column),
                        phase == "test")
                (losses if "loss" in column.lower() else others).append(line)
        rows = log.train or log.test
        if rows:
            rates.append((name, *_series(rows, x_column, "LearningRate"), False))
    panels = (("loss", losses), ("accuracy", others), ("learning rate", rates))
    return [(title, lines) for title, lines in panels if lines]


def _series(rows, x_column, y_column):
    return ([row[x_column] for row in rows],
            [row.get(y_column, math.nan) for row in rows])


def _draw_panel(axes, title, lines, x_label):
    # the learning rate holds from one logged value to the next
    drawstyle = "steps-post" if title == "learning rate" else "default"
    for label, xs, ys, dashed in lines:
        axes.plot(xs, ys, linestyle="--" if dashed else "-", marker="o" if dashed else None,
                  markersize=3, label=label, drawstyle=drawstyle)
    axes.set_ylabel(title)
    axes.set_xlabel(x_label)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")


def save_figure(figure, path, image_format=None):
    """Write ``figure`` to ``path`` (atomically) in ``image_format`` (default: from the
    extension)."""
    image_format = image_format or output_format(path)
    with atomic_write(path, "wb") as stream:
        figure.savefig(stream, format=image_format, dpi=DPI)
