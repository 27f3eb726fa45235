"""DummyData: tops filled by fillers, for tests and benchmarks (Caffe's DummyDataLayer).

``dummy_data_param`` gives the top shapes (``shape``, or the legacy ``num``/``channels``/
``height``/``width``), each once for all tops or once per top, and ``data_filler`` (none:
constant 0; one for all tops; or one per top). As in Caffe, tops with a "constant" filler are
filled once at setup and never again; every other top is refilled on every forward.
"""
from pycaffe_cli.fillers import make_filler
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.proto import caffe_pb2

_LEGACY = ("num", "channels", "height", "width")


@register("DummyData", v1="DUMMY_DATA")
class DummyDataLayer(Layer):
    """No bottoms; one or more tops of fixed shapes filled by fillers."""

    exact_num_bottom = 0
    min_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.param.dummy_data_param
        num_fillers = len(p.data_filler)
        if num_fillers not in (0, 1, len(top)):
            raise self.error(f"number of data fillers must be 0, 1 or equal to the number of "
                             f"tops: {len(top)}; you specified {num_fillers} data fillers")
        for i, shape in enumerate(self._top_shapes(p, len(top))):
            top[i].reshape(shape)
        if num_fillers == 0:
            filler_params = [caffe_pb2.FillerParameter(type="constant", value=0)]
        elif num_fillers == 1:
            filler_params = [p.data_filler[0]]
        else:
            filler_params = list(p.data_filler)
        self._fillers = [make_filler(fp, self.name) for fp in filler_params]
        self._constant = [fp.type == "constant" for fp in filler_params]
        for i, blob in enumerate(top):
            k = self._filler_index(i)
            if self._constant[k]:
                self._fillers[k](blob)

    def _top_shapes(self, p, num_top):
        legacy = any(len(getattr(p, f)) for f in _LEGACY)
        if legacy:
            if len(p.shape):
                raise self.error("dummy_data_param: both shape and legacy fields "
                                 "(num/channels/height/width) were specified")
            for f in _LEGACY:
                given = len(getattr(p, f))
                if given not in (1, num_top):
                    raise self.error(f"dummy_data_param: must specify '{f}' once, or once per "
                                     f"top blob ({num_top}); specified {given}")
            return [tuple(_pick(getattr(p, f), i) for f in _LEGACY) for i in range(num_top)]
        if len(p.shape) not in (1, num_top):
            raise self.error(f"dummy_data_param: must specify 'shape' once, or once per top "
                             f"blob ({num_top}); specified {len(p.shape)}")
        return [tuple(_pick(p.shape, i).dim) for i in range(num_top)]

    def _filler_index(self, top_index):
        return top_index if len(self._fillers) > 1 else 0

    def reshape(self, bottom, top):
        """Shapes are fixed at setup."""

    def forward_cpu(self, bottom, top):
        for i, blob in enumerate(top):
            k = self._filler_index(i)
            if not self._constant[k]:
                self._fillers[k](blob)


def _pick(values, index):
    return values[0] if len(values) == 1 else values[index]
