"""One WARNING when ``pycaffe test`` or ``pycaffe time`` computes NaN or inf.

Caffe prints ``loss = nan`` and goes on; so does pycaffe, but, as training does
(solvers/divergence.py), it first warns once, naming the first layer in forward order whose
output is not finite. After each pass only the loss and the net's outputs are looked at, so a
healthy run pays next to nothing. When one is NaN or inf, the pass is run again layer by
layer and each layer's tops are checked as soon as it has run: a scan of the tops after the
pass (what training does) could blame the wrong layer here, since an inference plan lets
layers share blob memory, and an in-place layer overwrites its bottom. Layers without
bottoms (data layers, Input, DummyData) are not run again: their tops still hold the batch,
so the second pass sees the same inputs (an in-place layer on such a top sees it twice
transformed, which rarely changes whether it is finite).
"""
import numpy as np

from pycaffe_cli.log import LOG


def _finite(blob):
    return bool(np.isfinite(blob.cpu_data).all())


class NonFiniteWatch:
    """Warns once, naming the first layer that computed NaN or inf.

    Args:
        net: the Net whose passes are checked (run through it or through its inference plan).
        going_on: what the command keeps doing, for the message ("Testing").
    """

    def __init__(self, net, going_on):
        self.net = net
        self.going_on = going_on
        self.reported = False

    def check(self, loss, when):
        """Call after a forward pass (``when`` names it: "Batch 3") with its loss."""
        if self.reported or (np.isfinite(loss) and self._outputs_finite()):
            return
        self.reported = True
        LOG.warning(f"{when}: the net computes NaN or inf: {self._first_layer()}. "
                    f"{self.going_on} goes on, as in Caffe (this is reported once).")

    def _outputs_finite(self):
        entries = self.net.blob_entries
        return all(_finite(entries[i].blob) for i in self.net.output_blob_indices)

    def _first_layer(self):
        """Where the NaN or inf comes from, found by running the pass again (module doc)."""
        for entry in self.net.layer_entries:
            if entry.bottoms:
                entry.layer.forward(entry.bottoms, entry.tops)
            for blob, blob_id in zip(entry.tops, entry.top_ids):
                if blob.count() and not _finite(blob):
                    return _blame(entry, self.net.blob_entries[blob_id].name)
        return ("no layer's output is NaN or inf when the pass is run again (the loss terms "
                "overflowed when added, or the layers do not compute the same twice)")


def _blame(entry, top):
    layer = entry.layer
    where = (f'layer "{layer.name}" (type {layer.type}) is the first whose output ("{top}") '
             "is NaN or inf")
    if not entry.bottoms:
        where += "; it has no bottoms, so what it reads (or its mean) holds NaN or inf"
    elif not all(_finite(blob) for blob in layer.blobs):
        where += "; its own weights are NaN or inf"
    return where
