"""The parameter echo in the log ("Initializing net from parameters:"), capped for huge nets.

Caffe logs the whole NetParameter when it builds a net, and the whole SolverParameter when it
builds a solver; pycaffe does the same for any net of up to ``MAX_ECHO_LAYERS`` layers and
``MAX_ECHO_BYTES`` of text. Beyond that (a generated net of a million layers is 60 MB of text)
the echo stops after the layers that fit and ends with a comment line,
``# ... (999000 more layers not shown; 1000001 in all)``, so it stays valid prototxt.
"""
from google.protobuf import text_format

from pycaffe_cli.net.passes import without_layers

MAX_ECHO_LAYERS = 2000
MAX_ECHO_BYTES = 1 << 20
_SOLVER_NETS = ("net_param", "train_net_param", "test_net_param")


def net_text(param):
    """``param`` (a NetParameter) in text format, capped as the module docstring says."""
    if len(param.layer) <= MAX_ECHO_LAYERS and param.ByteSize() <= MAX_ECHO_BYTES:
        return text_format.MessageToString(param)
    header = without_layers(param)
    # ``layer`` is NetParameter's highest-numbered field, so the text format prints it last:
    # the header followed by the layers is what MessageToString would give.
    parts = [text_format.MessageToString(header)]
    size = len(parts[0])
    shown = 0
    for layer in param.layer:
        if shown == MAX_ECHO_LAYERS or size > MAX_ECHO_BYTES:
            break
        parts.append("layer {\n" + text_format.MessageToString(layer, indent=2) + "}\n")
        size += len(parts[-1])
        shown += 1
    if shown < len(param.layer):
        parts.append(f"# ... ({len(param.layer) - shown} more layers not shown; "
                     f"{len(param.layer)} in all)\n")
    return "".join(parts)


def solver_text(param):
    """``param`` (a SolverParameter) in text format; nets given inline (``net_param``,
    ``train_net_param``, ``test_net_param``) are cut to MAX_ECHO_LAYERS layers each."""
    if param.ByteSize() <= MAX_ECHO_BYTES:
        return text_format.MessageToString(param)
    short = type(param)()
    short.CopyFrom(param)
    hidden = []
    for name in _SOLVER_NETS:
        nets = getattr(short, name)
        for index, net in enumerate(nets if name == "test_net_param" else [nets]):
            if len(net.layer) > MAX_ECHO_LAYERS:
                label = f"{name}[{index}]" if name == "test_net_param" else name
                hidden.append(f"{label}: {len(net.layer) - MAX_ECHO_LAYERS} more layers")
                del net.layer[MAX_ECHO_LAYERS:]
    text = text_format.MessageToString(short)
    if hidden:
        text += f"# ... ({'; '.join(hidden)} not shown)\n"
    return text
