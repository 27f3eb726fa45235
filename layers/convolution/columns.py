"""The column matrix's geometry: a window over images of one shape (Caffe's conv_im2col_cpu).

``ColumnGeometry`` holds a window (kernel, pad, stride, dilation per spatial axis), fixes the
unfolded image's shape at reshape, and unfolds (``im2col``) and folds back (``col2im``) flat
buffers of a batch of images, dispatching to the 2-d kernels or the N-d ones as Caffe does
(N-d for windows of other than two axes, or where ``force_nd_im2col`` asks); on the device
the 2-d CUDA kernels (kernels/cuda/im2col.py). The column buffers themselves belong to the
backends (backend.py); the convolution layers (base.py) and the Im2col layer use this class.
"""
import numpy as np

from pycaffe_cli.layers.kernels.cpu import im2col as kernels
from pycaffe_cli.layers.kernels.geometry import conv_out_size


class ColumnGeometry:
    """A window (kernel, pad, stride, dilation per spatial axis) over images of one shape,
    with im2col/col2im dispatched to the 2-d kernels or the N-d ones (as Caffe does)."""

    def __init__(self, kernel, pad, stride, dilation, force_nd):
        self.kernel, self.pad, self.stride, self.dilation = kernel, pad, stride, dilation
        self.use_2d = len(kernel) == 2 and not force_nd
        self._nd = [np.array(v, np.int64) for v in (kernel, pad, stride, dilation)]
        self.channels = 0
        self.im_shape = ()
        self.out_shape = ()

    def output_shape(self, im_shape):
        """Per-axis output sizes for an input of spatial shape ``im_shape``."""
        return tuple(conv_out_size(size, k, p, s, d) for size, k, p, s, d in
                     zip(im_shape, self.kernel, self.pad, self.stride, self.dilation))

    def set_image(self, channels, im_shape):
        """Fix the unfolded image shape; returns the output (column) spatial shape."""
        self.channels = channels
        self.im_shape = tuple(im_shape)
        self.out_shape = self.output_shape(im_shape)
        self._im_nd = np.array(self.im_shape, np.int64)
        return self.out_shape

    def args_2d(self):
        """(channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w,
        dilation_h, dilation_w): the 2-d kernels' geometry arguments."""
        (kh, kw), (ph, pw), (sh, sw), (dh, dw) = (self.kernel, self.pad, self.stride,
                                                  self.dilation)
        return (self.channels,) + self.im_shape + (kh, kw, ph, pw, sh, sw, dh, dw)

    def im2col(self, im, num, col, batch_major):
        """Unfold ``num`` images (flat ``im``) into the flat buffer ``col``."""
        if self.use_2d:
            kernels.im2col_batch(im, num, *self.args_2d(), col, batch_major)
        else:
            kernels.im2col_nd(im, num, self.channels, self._im_nd, *self._nd, col, batch_major)

    def col2im(self, col, num, im, batch_major):
        """Fold ``col`` back into ``num`` images, overwriting the flat ``im``."""
        if self.use_2d:
            kernels.col2im_batch(col, num, *self.args_2d(), im, batch_major)
        else:
            kernels.col2im_nd(col, num, self.channels, self._im_nd, *self._nd, im, batch_major)

    def gpu_im2col(self, im, num, col, batch_major):
        """``im2col`` on flat device arrays (2-d windows only: see ``use_2d``)."""
        from pycaffe_cli.layers.kernels.cuda import im2col
        im2col.im2col_batch(im, num, *self.args_2d(), col, batch_major)

    def gpu_col2im(self, col, num, im, batch_major):
        """``col2im`` on flat device arrays (2-d windows only)."""
        from pycaffe_cli.layers.kernels.cuda import im2col
        im2col.col2im_batch(col, num, *self.args_2d(), im, batch_major)
