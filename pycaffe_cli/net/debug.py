"""The lines a net with ``debug_info: true`` logs after each layer's pass (Caffe's
ForwardDebugInfo / BackwardDebugInfo / UpdateDebugInfo): mean absolute values of every top,
bottom diff and param."""
import numpy as np

from pycaffe_cli.log import LOG


def log_forward(net, layer_id):
    entry = net.layer_entries[layer_id]
    name = entry.name
    for blob, blob_id in zip(entry.tops, entry.top_ids):
        LOG.info(f"    [Forward] Layer {name}, top blob {net.blob_entries[blob_id].name} data: "
                 f"{_mean_abs(blob.asum_data(), blob):g}")
    for param_id, blob in enumerate(entry.layer.blobs):
        LOG.info(f"    [Forward] Layer {name}, param blob {param_id} data: "
                 f"{_mean_abs(blob.asum_data(), blob):g}")


def log_backward(net, layer_id):
    entry = net.layer_entries[layer_id]
    name, layer = entry.name, entry.layer
    for j, blob in enumerate(entry.bottoms):
        if entry.bottom_need_backward[j]:
            blob_name = net.blob_entries[entry.bottom_ids[j]].name
            LOG.info(f"    [Backward] Layer {name}, bottom blob {blob_name} diff: "
                     f"{_mean_abs(blob.asum_diff(), blob):g}")
    for param_id, blob in enumerate(layer.blobs):
        if layer.param_propagate_down[param_id]:
            LOG.info(f"    [Backward] Layer {name}, param blob {param_id} diff: "
                     f"{_mean_abs(blob.asum_diff(), blob):g}")


def log_param_norms(net):
    sums = np.zeros(4)
    for entry in net.learnable_entries:
        blob = entry.blob
        sums += (blob.asum_data(), blob.asum_diff(), blob.sumsq_data(), blob.sumsq_diff())
    LOG.info(f"    [Backward] All net params (data, diff): L1 norm = ({sums[0]:g}, "
             f"{sums[1]:g}); L2 norm = ({np.sqrt(sums[2]):g}, {np.sqrt(sums[3]):g})")


def _mean_abs(asum, blob):
    return asum / max(blob.count(), 1)
