"""What the rpn layers share: reading ``param_str`` without pyyaml, the phase's name, and the
base class (``caffe.Layer`` where a caffe module is importable)."""
import ast
import re

try:
    import caffe
    LayerBase = caffe.Layer
except ImportError:   # importable (for its helpers) without a caffe module on the path
    LayerBase = object

PHASES = ("TRAIN", "TEST")
BARE_KEY = re.compile(r"(^|[,{]\s*)([A-Za-z_]\w*)\s*:")   # feat_stride: in YAML's flow style


def parse_param_str(text):
    """The dict a YAML mapping such as ``'feat_stride': 16``, ``{feat_stride: 16}`` or
    ``feat_stride: 16`` lines describes, read as a Python dict literal (bare keys quoted, the
    braces added), so pyyaml is not needed; pyyaml, where installed, reads anything else."""
    text = (text or "").strip()
    if not text:
        return {}
    body = text[1:-1] if text.startswith("{") and text.endswith("}") else text
    body = ", ".join(line for line in body.splitlines() if line.strip())
    quoted = BARE_KEY.sub(lambda match: f"{match.group(1)}'{match.group(2)}':", body)
    try:
        value = ast.literal_eval("{" + quoted + "}")
    except (ValueError, SyntaxError):
        value = _parse_yaml(text)
    if not isinstance(value, dict):
        raise ValueError(f"param_str must describe a mapping such as \"'feat_stride': 16\", "
                         f"not {text!r}")
    return value


def _parse_yaml(text):
    try:
        import yaml
    except ImportError:
        raise ValueError(f"cannot read param_str {text!r} (a mapping such as "
                         "\"'feat_stride': 16\"; pyyaml, which could read more, is not "
                         "installed)") from None
    return yaml.safe_load(text)


def phase_name(phase):
    """'TRAIN' or 'TEST' from caffe.TRAIN/TEST, 0/1 or the names."""
    if isinstance(phase, str) and phase.upper() in PHASES:
        return phase.upper()
    return PHASES[int(phase)]


def read_params(layer, known, required=()):
    """The layer's ``param_str`` as a dict, refusing keys not in ``known`` (a typo would
    otherwise be silently ignored) and requiring those in ``required``."""
    name = type(layer).__name__
    params = parse_param_str(getattr(layer, "param_str", None))
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"{name}: unknown param_str key(s) {', '.join(unknown)}; known: "
                         f"{', '.join(known)}")
    for key in ([required] if isinstance(required, str) else required):
        if key not in params:
            raise ValueError(f"{name}: param_str must give {key}, e.g. \"'{key}': 16\"")
    return params
