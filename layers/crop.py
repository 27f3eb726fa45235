"""Crop: cut bottom[0] down to bottom[1]'s shape from ``axis`` on (Caffe's CropLayer).

For every axis i >= axis the top takes bottom[1].shape[i] entries of bottom[0] starting at
offset[i] (one ``offset`` for all cropped axes, one per cropped axis, or none: 0); the axes
before ``axis`` are kept whole:

    forward:   y = x[..., o_a : o_a + s_a, ...]
    backward:  dx = 0 everywhere, dx[..., o_a : o_a + s_a, ...] = dy

bottom[1] only supplies a shape and never receives a gradient.

GPU mode: a strided copy of the window each way (``pycaffe_cli/cuda/copy.py``); backward zeroes
the bottom diff first, as Caffe does.
"""
from pycaffe_cli.cuda import copy, memory
from pycaffe_cli.layers.base import Layer, register
from pycaffe_cli.layers.views import layer_axis


@register("Crop")
class CropLayer(Layer):
    """crop_param: axis (default 2), offset (repeated)."""

    exact_num_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        offsets = self.param.crop_param.offset
        start = layer_axis(self, bottom[0], self.param.crop_param.axis)
        if len(offsets) > 1 and start + len(offsets) != bottom[0].num_axes:
            raise self.error(f"number of offset values specified ({len(offsets)}) must be "
                             f"equal to the number of dimensions following axis {start} "
                             f"({bottom[0].num_axes - start}) of {bottom[0].shape_string()}")

    def reshape(self, bottom, top):
        source, reference = bottom
        start = layer_axis(self, source, self.param.crop_param.axis)
        if reference.num_axes < source.num_axes:
            raise self.error(f"the reference bottom {reference.shape_string()} has fewer axes "
                             f"than the cropped bottom {source.shape_string()}")
        given = list(self.param.crop_param.offset)
        shape, self.slices = list(source.shape), []
        for i in range(source.num_axes):
            offset = 0
            if i >= start:
                offset = given[0] if len(given) == 1 else (given[i - start] if given else 0)
                shape[i] = reference.shape[i]
                if source.shape[i] - offset < reference.shape[i]:
                    raise self.error(f"the crop for dimension {i} is out-of-bounds with size "
                                     f"{reference.shape[i]} and offset {offset} (bottom[0] "
                                     f"is {source.shape_string()})")
            self.slices.append(slice(offset, offset + shape[i]))
        self.slices = tuple(self.slices)
        top[0].reshape(shape)

    def forward_cpu(self, bottom, top):
        top[0].data[...] = bottom[0].data[self.slices]

    def backward_cpu(self, top, propagate_down, bottom):
        if propagate_down[0]:
            diff = bottom[0].diff
            diff[...] = 0
            diff[self.slices] = top[0].diff

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0

    # --- GPU ---------------------------------------------------------------------------
    def _window(self, bottom, top):
        """(window shape, its start in the bottom, bottom strides, top strides)."""
        strides = copy.contiguous_strides(bottom[0].shape)
        start = sum(s.start * stride for s, stride in zip(self.slices, strides))
        return top[0].shape, start, strides, copy.contiguous_strides(top[0].shape)

    def forward_gpu(self, bottom, top):
        shape, start, strides, top_strides = self._window(bottom, top)
        copy.strided_copy(shape, bottom[0].gpu_data, start, strides,
                          top[0].mutable_gpu_data, 0, top_strides)

    def backward_gpu(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        shape, start, strides, top_strides = self._window(bottom, top)
        diff = bottom[0].mutable_gpu_diff
        memory.fill(diff, 0)
        copy.strided_copy(shape, top[0].gpu_diff, 0, top_strides, diff, start,
                          strides)
