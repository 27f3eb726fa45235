"""One warning when training diverges.

Caffe goes on training when the loss becomes NaN or infinite, and so does pycaffe; but the
first time it happens pycaffe logs one WARNING naming the first layer, in forward order,
whose output is not finite: usually the place to look (a learning rate too high, the log of
zero, a division by a zero norm). Only a non-finite loss starts the scan of the tops, so a
run whose loss stays finite pays one comparison per iteration.
"""
import numpy as np

from pycaffe_cli.log import LOG


def _finite(blob):
    return np.isfinite(blob.cpu_data).all()


def first_non_finite_output(net):
    """``(layer index, top name)`` of the first layer whose top holds NaN or inf, or None.

    A layer computing in place shares its top with the layer before it, which is then
    the one named.
    """
    for layer_id, entry in enumerate(net.layer_entries):
        for blob, blob_id in zip(entry.tops, entry.top_ids):
            if blob.count() and not _finite(blob):
                return layer_id, net.blob_entries[blob_id].name
    return None


def divergence_message(loss, net, iteration):
    """The warning's text for a non-finite ``loss`` at ``iteration``."""
    found = first_non_finite_output(net)
    if found is None:
        where = ("no layer's output is NaN or inf after the last forward pass (the loss terms "
                 "overflowed when added, or an earlier pass of iter_size went wrong)")
    else:
        layer_id, top = found
        layer = net.layer_entries[layer_id].layer
        where = (f'layer "{layer.name}" (type {layer.type}) is the first whose '
                 f'output ("{top}") is NaN or inf')
        if not all(_finite(blob) for blob in layer.blobs):
            where += "; its own weights are NaN or inf"
    return (f"Iteration {iteration}, loss = {float(loss):g}: training diverged: {where}. "
            "Training goes on, as in Caffe (this is reported once).")


class DivergenceWatch:
    """Logs ``divergence_message`` the first time ``check`` sees a non-finite loss."""

    def __init__(self):
        self.reported = False

    def check(self, loss, net, iteration):
        """Call after each iteration's forward/backward passes with its loss."""
        if self.reported or np.isfinite(loss):
            return
        self.reported = True
        LOG.warning(divergence_message(loss, net, iteration))
