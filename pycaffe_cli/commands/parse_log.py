"""``pycaffe parse_log``: Caffe's tools/extra/parse_log.py (with extract_seconds.py).

A training log (Caffe's or pycaffe's: the same glog lines) becomes two CSV files, LOG.train
and LOG.test, with Caffe's columns: NumIters, Seconds, LearningRate, then each net output in
the order the log first shows them. As in parse_log.py, the clock starts at the "Solving"
line, nothing before the first "Iteration N" counts, the year comes from the log file's ctime
and goes up by one whenever the month goes down, and a row is complete once it has as many
columns as the first row. Numbers are written as Python writes floats ("100.0", "nan"),
lines end in "\\r\\n" (the csv module's excel dialect).

Where parse_log.py would stop with a traceback (a blank or non-glog line, a value such as
"-nan"), the line or value is skipped; where it would write nothing although the log has
outputs (no "Solving" line; a single test pass), the clock starts at the first timestamped
line, and a lone row is kept.
"""
import csv
import datetime
import io
import itertools
import os
import re

import click

from pycaffe_cli.commands import subcommand
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.files import atomic_write
from pycaffe_cli.io.input_files import check_input_file, shown
from pycaffe_cli.log import LOG

ITERATION = re.compile(r"Iteration (\d+)")
TRAIN_OUTPUT = re.compile(r"Train net output #(\d+): (\S+) = ([\.\deE+-]+)")
TEST_OUTPUT = re.compile(r"Test net output #(\d+): (\S+) = ([\.\deE+-]+)")
LEARNING_RATE = re.compile(r"lr = ([-+]?[0-9]*\.?[0-9]+([eE]?[-+]?[0-9]+)?)")
# glog's prefix: severity letter, month, day, then hh:mm:ss.micros (extract_seconds.py).
GLOG_TIME = re.compile(r"\s*\S(\d\d)(\d\d)\s+(\d+):(\d+):(\d+)\.(\d{1,6})(?=\s|$)")
FIXED_COLUMNS = ("NumIters", "Seconds", "LearningRate")

TOOL_FLAGS = {
    "verbose": dict(default=False, is_flag=True,
                    help="Print some extra info (e.g., output filenames)."),
    "delimiter": dict(default=",", show_default=True, metavar="CHAR",
                      help="Column delimiter in output files."),
}


class TrainingLog:
    """The rows parse_log.py finds in one log.

    Attributes:
        path: the log file.
        train, test: lists of rows; a row maps column name -> float, in column order.
    """

    def __init__(self, path, train, test):
        self.path, self.train, self.test = path, train, test

    @staticmethod
    def columns(rows):
        """Every column of ``rows``, in order of first appearance."""
        names = {}
        for row in rows:
            names.update(dict.fromkeys(row))
        return list(names)


@subcommand("parse_log", flags=(), summary="parse a training log into .train/.test CSV files",
            arguments=("LOGFILE", "[OUTPUT_DIR]"), own_flags=TOOL_FLAGS)
def parse_log_command(logfile, output_dir, verbose, delimiter):
    """Parse a Caffe (or pycaffe) training log into two CSV files, LOGFILE.train and
    LOGFILE.test, containing training and testing information. They go to OUTPUT_DIR
    (default: the log's folder)."""
    if len(delimiter) != 1:
        raise CaffeError(f"--delimiter '{shown(delimiter)}': give a single character")
    log = parse_log(logfile)
    if output_dir is None:
        output_dir = os.path.dirname(logfile)
    written = save_csv_files(log, output_dir, delimiter, verbose)
    if not written:
        LOG.warning(f"{logfile}: no 'Train net output' or 'Test net output' lines after the "
                    "first iteration; no CSV file written")
    return 0


def parse_log(path):
    """Read the log at ``path`` into a TrainingLog (parse_log.py's parse_log).

    Raises:
        CaffeError: the file is missing, unreadable or not a regular file.
    """
    check_input_file(path, "log file")
    train, test = _Rows(TRAIN_OUTPUT), _Rows(TEST_OUTPUT)
    try:
        year = datetime.datetime.fromtimestamp(os.path.getctime(path)).year
        with _open_log(path) as stream:
            skip, start = _start(stream, year)
        if start is not None:
            with _open_log(path) as stream:
                _scan(itertools.islice(stream, skip, None), year, start, (train, test))
    except OSError as error:
        raise CaffeError(f"cannot read log file '{shown(path)}': "
                         f"{error.strerror or error}") from None
    return TrainingLog(str(path), train.finish(), test.finish())


def _open_log(path):
    return open(path, encoding="utf-8", errors="replace")


def _start(lines, year):
    """(how many lines come before the clock's start, start time): the "Solving" line, else
    the first timestamped line (where parse_log.py finds nothing); (0, None) for neither."""
    first = (0, None)
    for index, line in enumerate(lines):
        time = line_time(line, year)
        if time is None:
            continue
        if "Solving" in line:
            return index + 1, time
        if first[1] is None:
            first = (index, time)
    return first


def _scan(lines, year, start, tables):
    iteration, learning_rate, last = -1.0, float("nan"), start
    for line in lines:
        match = ITERATION.search(line)
        if match:
            iteration = float(match.group(1))
        if iteration == -1:
            continue
        time = line_time(line, year)
        if time is None:
            continue
        if time.month < last.month:     # the log ran past New Year
            year += 1
            time = line_time(line, year)
            if time is None:
                continue
        last = time
        seconds = (time - start).total_seconds()
        match = LEARNING_RATE.search(line)
        if match:
            learning_rate = float(match.group(1))
        for table in tables:
            table.feed(line, iteration, seconds, learning_rate)


def line_time(line, year):
    """The datetime of a glog line in ``year``, or None for a line without one."""
    match = GLOG_TIME.match(line)
    if not match:
        return None
    month, day, hour, minute, second, fraction = (int(part) for part in match.groups())
    try:
        return datetime.datetime(year, month, day, hour, minute, second, fraction)
    except ValueError:      # 29 February in a year that has none, an hour of 25
        return None


class _Rows:
    """parse_log.py's parse_line_for_net_output: a row per iteration that shows outputs."""

    def __init__(self, pattern):
        self.pattern, self.rows, self.row = pattern, [], None

    def feed(self, line, iteration, seconds, learning_rate):
        output = self._output(line)
        if output:
            if self.row is None or self.row["NumIters"] != iteration:
                if self.row is not None:
                    self.rows.append(self.row)
                self.row = {"NumIters": iteration, "Seconds": seconds,
                            "LearningRate": learning_rate}
            name, value = output
            self.row[name] = value
        if self.row is not None and self.rows and len(self.row) == len(self.rows[0]):
            self.rows.append(self.row)
            self.row = None

    def _output(self, line):
        match = self.pattern.search(line)
        if not match:
            return None
        try:
            return match.group(2), float(match.group(3))
        except ValueError:      # "-nan" matches the pattern as "-"
            return None

    def finish(self):
        """The rows; the first one takes the second's learning rate (it is logged after the
        first outputs)."""
        if self.row is not None and not self.rows:
            self.rows.append(self.row)
        if len(self.rows) > 1:
            self.rows[0]["LearningRate"] = self.rows[1]["LearningRate"]
        return self.rows


def save_csv_files(log, output_dir, delimiter=",", verbose=False):
    """Write LOG.train and LOG.test (the log's base name) in ``output_dir``; a table without
    rows is not written. Returns the paths written."""
    base = os.path.join(output_dir, os.path.basename(log.path))
    written = []
    for suffix, rows in ((".train", log.train), (".test", log.test)):
        path = base + suffix
        if not rows:
            if verbose:
                click.echo(f"Not writing {path}; no lines to write")
            continue
        with atomic_write(path, "wb") as stream:
            stream.write(csv_text(rows, delimiter).encode("utf-8"))
        written.append(path)
        if verbose:
            click.echo(f"Wrote {path}")
    return written


def csv_text(rows, delimiter=","):
    """The CSV parse_log.py writes: a header, then one line per row ('' where a row lacks a
    column)."""
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=TrainingLog.columns(rows), dialect="excel",
                            delimiter=delimiter)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
