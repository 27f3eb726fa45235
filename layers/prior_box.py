"""PriorBox: SSD's default boxes for one feature map (SSD's PriorBoxLayer).

Bottoms: the feature map (its height H and width W) and the image (its size, unless
img_size or img_h/img_w give it). Top: (1, 2, H * W * P * 4) for P priors per cell; channel
0 holds the boxes (xmin, ymin, xmax, ymax), normalised by the image size, cell by cell (row
major) and prior by prior; channel 1 holds the variances, the same 4 values for every box.

The cell (h, w) is centred at ((w + offset) * step_w, (h + offset) * step_h) pixels, the step
being step/step_h/step_w or else the image size over the feature map size. Its priors come in
the fork's order, for each min_size m in turn:

    1. a square of side m;
    2. with max_size M given: a square of side sqrt(m * M);
    3. for each aspect ratio r other than 1 (with flip: each given r followed by 1 / r;
       ratios within 1e-6 of one already listed are dropped): width m sqrt(r), height
       m / sqrt(r) (max_size plays no part, as in the fork's ssd branch and its tests).

With ``clip`` the box coordinates are clamped to [0, 1]. The values depend on the shapes
only, so backward does nothing (as the fork's). In GPU mode the boxes are computed on the host
and copied into the top's device memory (the fork has no GPU kernel either).

Like the fork, the box arithmetic truncates min_size and max_size to integers (a min_size
of 35.84 gives boxes of side 35, as in the models trained with the fork) and rounds as its
C++ does: centres and box sides in float32, the corners in double, stored as float32. The
fork takes a non-positive aspect_ratio (boxes of infinite or NaN size); this refuses it.
"""
import math

import numpy as np

from pycaffe_cli.io.foreign import SSD
from pycaffe_cli.layers.base import Layer, register

DEFAULT_VARIANCE = 0.1


@register("PriorBox", fork=SSD)
class PriorBoxLayer(Layer):
    """prior_box_param: min_size (repeated, required), max_size (repeated, one per min_size),
    aspect_ratio (repeated), flip (true), clip (false), variance (1 or 4 values, default 0.1),
    img_size or img_h/img_w, step or step_h/step_w, offset (0.5)."""

    exact_num_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        param = self.param.prior_box_param
        if not param.min_size:
            raise self.error("PriorBox needs prior_box_param { min_size } (must provide "
                             "min_size)")
        self.min_sizes = [float(size) for size in param.min_size]
        for size in self.min_sizes:
            if not size > 0:
                raise self.error(f"prior_box_param min_size must be positive, got {size:g}")
        for ratio in param.aspect_ratio:
            if not ratio > 0:
                raise self.error(f"prior_box_param aspect_ratio must be positive, got "
                                 f"{ratio:g}")
        self.aspect_ratios = _aspect_ratios(param.aspect_ratio, param.flip)
        self.max_sizes = [float(size) for size in param.max_size]
        if self.max_sizes:
            if len(self.max_sizes) != len(self.min_sizes):
                raise self.error(f"prior_box_param gives {len(self.max_sizes)} max_size "
                                 f"value(s) for {len(self.min_sizes)} min_size value(s); "
                                 "give one per min_size or none")
            for low, high in zip(self.min_sizes, self.max_sizes):
                if not high > low:
                    raise self.error(f"prior_box_param max_size must be greater than "
                                     f"min_size, got max_size {high:g} for min_size {low:g}")
        self.num_priors = len(self.aspect_ratios) * len(self.min_sizes) + len(self.max_sizes)
        self.clip = param.clip
        self.variance = self._variance(param)
        self.img_h, self.img_w = self._pair(param, "img_size", "img_h", "img_w")
        self.step_h, self.step_w = self._pair(param, "step", "step_h", "step_w")
        self.offset = np.float32(param.offset)
        self._cache = None

    def _variance(self, param):
        values = [float(v) for v in param.variance]
        if len(values) not in (0, 1, 4):
            raise self.error(f"prior_box_param takes 1 or 4 variance values, got "
                             f"{len(values)}")
        for value in values:
            if not value > 0:
                raise self.error(f"prior_box_param variance must be positive, got {value:g}")
        return values or [DEFAULT_VARIANCE]

    def _pair(self, param, single, name_h, name_w):
        """(h, w) from ``single`` or its _h/_w fields (0, 0: unset), as the fork reads
        img_size and step."""
        if param.HasField(name_h) or param.HasField(name_w):
            if param.HasField(single):
                raise self.error(f"prior_box_param takes either {single} or "
                                 f"{name_h}/{name_w}, not both")
            pair = getattr(param, name_h), getattr(param, name_w)
            for name, value in zip((name_h, name_w), pair):
                if not value > 0:
                    raise self.error(f"prior_box_param {name} should be larger than 0, got "
                                     f"{value:g}")
            return pair
        if param.HasField(single):
            value = getattr(param, single)
            if not value > 0:
                raise self.error(f"prior_box_param {single} should be larger than 0, got "
                                 f"{value:g}")
            return value, value
        return 0, 0

    def reshape(self, bottom, top):
        height, width = bottom[0].height, bottom[0].width
        count = height * width * self.num_priors * 4
        if count == 0:
            raise self.error(f"the feature map {bottom[0].shape_string()} has no cells to "
                             "put priors on")
        top[0].reshape((1, 2, count))

    def _priors(self, bottom):
        """The top's values (2, H * W * P * 4) as float32, kept while the shapes stay."""
        layer_h, layer_w = bottom[0].height, bottom[0].width
        if self.img_h == 0 or self.img_w == 0:
            img_h, img_w = bottom[1].height, bottom[1].width
        else:
            img_h, img_w = self.img_h, self.img_w
        key = (layer_h, layer_w, img_h, img_w)
        if self._cache is None or self._cache[0] != key:
            self._cache = key, self._compute(layer_h, layer_w, img_h, img_w)
        return self._cache[1]

    def _compute(self, layer_h, layer_w, img_h, img_w):
        f32 = np.float32
        if self.step_h == 0 or self.step_w == 0:
            step_w, step_h = f32(img_w) / f32(layer_w), f32(img_h) / f32(layer_h)
        else:
            step_w, step_h = f32(self.step_w), f32(self.step_h)
        centre_x = (np.arange(layer_w, dtype=f32) + self.offset) * step_w   # float32, as C++
        centre_y = (np.arange(layer_h, dtype=f32) + self.offset) * step_h
        sizes = np.array(self._box_sizes(), np.float32)                    # (P, 2): w, h
        half_w = sizes[:, 0].astype(np.float64) / 2
        half_h = sizes[:, 1].astype(np.float64) / 2
        cx = centre_x.astype(np.float64)[None, :, None]
        cy = centre_y.astype(np.float64)[:, None, None]
        boxes = np.empty((layer_h, layer_w, len(sizes), 4), np.float64)
        boxes[..., 0] = (cx - half_w) / img_w
        boxes[..., 1] = (cy - half_h) / img_h
        boxes[..., 2] = (cx + half_w) / img_w
        boxes[..., 3] = (cy + half_h) / img_h
        out = np.empty((2, boxes.size), np.float32)
        out[0] = boxes.reshape(-1)
        if self.clip:
            np.clip(out[0], f32(0), f32(1), out=out[0])
        out[1].reshape(-1, len(self.variance))[...] = np.asarray(self.variance, np.float32)
        return out

    def _box_sizes(self):
        """[(width, height)] of one cell's priors, in the fork's order, as float32 values of
        the fork's arithmetic (integer sizes; square roots in double)."""
        sizes = []
        for index, min_size in enumerate(self.min_sizes):
            low = int(min_size)
            sizes.append((low, low))
            if self.max_sizes:
                side = math.sqrt(low * int(self.max_sizes[index]))
                sizes.append((side, side))
            for ratio in self.aspect_ratios:
                if abs(ratio - 1.0) < 1e-6:
                    continue
                root = math.sqrt(ratio)
                sizes.append((low * root, low / root))
        return sizes

    def forward_cpu(self, bottom, top):
        np.copyto(top[0].data.reshape(2, -1), self._priors(bottom))

    def forward_gpu(self, bottom, top):
        top[0].mutable_gpu_data.copy_to_device(self._priors(bottom).reshape(-1))


def _aspect_ratios(given, flip):
    """[1, then each given ratio not within 1e-6 of one already listed, each followed by its
    inverse with ``flip``], as float32 values."""
    ratios = [1.0]
    for ratio in given:
        ratio = float(np.float32(ratio))
        if any(abs(ratio - kept) < 1e-6 for kept in ratios):
            continue
        ratios.append(ratio)
        if flip:
            ratios.append(float(np.float32(1.0 / ratio)))
    return ratios
