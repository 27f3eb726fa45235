"""im2col / col2im kernels (2-d, batched layouts, N-d) against plain-numpy references."""
import itertools
import math

import numpy as np
import pytest

from pycaffe_cli.layers.kernels.cpu import im2col as kernels


def out_shape(shape, kernel, pad, stride, dilation):
    return tuple((s + 2 * p - d * (k - 1) - 1) // st + 1
                 for s, k, p, st, d in zip(shape, kernel, pad, stride, dilation))


def window(offset, dilation, stride, size):
    """The padded-image slice that kernel offset ``offset`` reads for all outputs."""
    return slice(offset * dilation, offset * dilation + stride * (size - 1) + 1, stride)


def reference_im2col(x, kernel, pad, stride, dilation):
    """x (N, C, *S) -> col (C, *kernel, N, *out) by slicing the zero-padded image."""
    n, c = x.shape[:2]
    out = out_shape(x.shape[2:], kernel, pad, stride, dilation)
    padded = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    col = np.zeros((c,) + tuple(kernel) + (n,) + out, x.dtype)
    for offsets in np.ndindex(*kernel):
        slices = tuple(window(o, d, s, size)
                       for o, d, s, size in zip(offsets, dilation, stride, out))
        col[(slice(None),) + offsets] = padded[(slice(None), slice(None)) + slices].swapaxes(0, 1)
    return col


def reference_col2im(col, image_shape, kernel, pad, stride, dilation):
    """The adjoint: add each kernel offset's slab back into the padded image, then crop."""
    c = col.shape[0]
    n = image_shape[0]
    out = col.shape[2 + len(kernel):]
    padded = np.zeros((n, c) + tuple(s + 2 * p for s, p in zip(image_shape[2:], pad)),
                      col.dtype)
    for offsets in np.ndindex(*kernel):
        slices = tuple(window(o, d, s, size)
                       for o, d, s, size in zip(offsets, dilation, stride, out))
        padded[(slice(None), slice(None)) + slices] += col[(slice(None),) + offsets].swapaxes(0, 1)
    crop = tuple(slice(p, p + s) for p, s in zip(pad, image_shape[2:]))
    return padded[(slice(None), slice(None)) + crop]


def as_layout(col, batch_major):
    """(C, *k, N, *out) -> the kernels' flat (rows, N, P) or (N, rows, P) buffer."""
    c = col.shape[0]
    k = (len(col.shape) - 2) // 2
    rows = c * math.prod(col.shape[1:1 + k])
    n = col.shape[1 + k]
    matrix = col.reshape(rows, n, -1)
    return (matrix.transpose(1, 0, 2) if batch_major else matrix).reshape(-1)


def from_layout(flat, col_shape, batch_major):
    c = col_shape[0]
    k = (len(col_shape) - 2) // 2
    rows = c * math.prod(col_shape[1:1 + k])
    n = col_shape[1 + k]
    if batch_major:
        return np.ascontiguousarray(flat.reshape(n, rows, -1).transpose(1, 0, 2)).reshape(
            col_shape)
    return flat.reshape(col_shape)


GEOMETRIES_2D = [  # kernel, pad, stride, dilation
    (k, p, s, d) for k, p, s, d in itertools.product(
        [(1, 1), (3, 3), (3, 2)], [(0, 0), (1, 1), (2, 1)], [(1, 1), (2, 2), (1, 3)],
        [(1, 1), (2, 2), (1, 2)])
    if all(size + 2 * pp >= dd * (kk - 1) + 1 for size, kk, pp, dd in zip((7, 6), k, p, d))]

int64 = lambda values: np.array(values, np.int64)  # noqa: E731


@pytest.fixture(scope="module")
def image():
    return np.random.default_rng(0).normal(size=(3, 2, 7, 6)).astype(np.float32)


def check_batched_2d_kernels(image, kernel, pad, stride, dilation, batch_major):
    """im2col_batch against numpy's unfolding, col2im_batch against numpy's folding."""
    n, c, h, w = image.shape
    args = (*kernel, *pad, *stride, *dilation)
    expected = reference_im2col(image, kernel, pad, stride, dilation)
    col = np.full(expected.size, np.nan, np.float32)
    kernels.im2col_batch(image.reshape(-1), n, c, h, w, *args, col, batch_major)
    np.testing.assert_array_equal(from_layout(col, expected.shape, batch_major), expected)

    grad = np.random.default_rng(1).normal(size=expected.shape).astype(np.float32)
    folded = np.full(image.size, np.nan, np.float32)
    kernels.col2im_batch(as_layout(grad, batch_major), n, c, h, w, *args, folded, batch_major)
    np.testing.assert_allclose(folded.reshape(image.shape),
                               reference_col2im(grad, image.shape, kernel, pad, stride,
                                                dilation), rtol=1e-6, atol=1e-6)
    return expected.size


@pytest.mark.parametrize("batch_major", [False, True])
@pytest.mark.parametrize("kernel, pad, stride, dilation", GEOMETRIES_2D)
def test_batched_2d_kernels_match_numpy(image, kernel, pad, stride, dilation, batch_major):
    check_batched_2d_kernels(image, kernel, pad, stride, dilation, batch_major)


@pytest.mark.parametrize("batch_major", [False, True])
def test_large_buffers_unfold_and_fold_in_threads(batch_major):
    """Past im2col.PARALLEL_MIN column values the kernels run a prange: the same values."""
    big = np.random.default_rng(2).normal(size=(2, 8, 90, 90)).astype(np.float32)
    size = check_batched_2d_kernels(big, (3, 3), (1, 1), (1, 1), (1, 1), batch_major)
    assert size >= kernels.PARALLEL_MIN


@pytest.mark.parametrize("kernel, pad, stride, dilation", GEOMETRIES_2D[::5])
def test_nd_kernels_agree_with_2d(image, kernel, pad, stride, dilation):
    n, c, h, w = image.shape
    args = (*kernel, *pad, *stride, *dilation)
    rows = c * math.prod(kernel)
    size = rows * n * math.prod(out_shape((h, w), kernel, pad, stride, dilation))
    col_2d, col_nd = np.empty(size, np.float32), np.empty(size, np.float32)
    kernels.im2col_batch(image.reshape(-1), n, c, h, w, *args, col_2d, False)
    geometry = [int64(v) for v in (kernel, pad, stride, dilation)]
    kernels.im2col_nd(image.reshape(-1), n, c, int64((h, w)), *geometry, col_nd, False)
    np.testing.assert_array_equal(col_nd, col_2d)
    back_2d, back_nd = np.empty(image.size, np.float32), np.empty(image.size, np.float32)
    kernels.col2im_batch(col_2d, n, c, h, w, *args, back_2d, False)
    kernels.col2im_nd(col_2d, n, c, int64((h, w)), *geometry, back_nd, False)
    np.testing.assert_array_equal(back_nd, back_2d)   # same summation order


ND_CASES = [  # image shape (N, C, *S), kernel, pad, stride, dilation
    ((2, 3, 5, 4, 6), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    ((2, 3, 5, 4, 6), (2, 3, 1), (0, 1, 2), (2, 1, 3), (2, 1, 1)),
    ((1, 2, 6, 5, 4), (3, 2, 2), (1, 0, 1), (1, 2, 1), (1, 2, 2)),
    ((2, 3, 9), (3,), (1,), (2,), (2,)),
    ((2, 2, 3, 4, 3, 4), (2, 2, 2, 2), (1, 0, 0, 1), (1, 1, 2, 1), (1, 1, 1, 2)),
]


@pytest.mark.parametrize("batch_major", [False, True])
@pytest.mark.parametrize("shape, kernel, pad, stride, dilation", ND_CASES)
def test_nd_kernels_match_numpy(shape, kernel, pad, stride, dilation, batch_major):
    rng = np.random.default_rng(2)
    x = rng.normal(size=shape).astype(np.float32)
    geometry = [int64(v) for v in (kernel, pad, stride, dilation)]
    expected = reference_im2col(x, kernel, pad, stride, dilation)
    col = np.full(expected.size, np.nan, np.float32)
    kernels.im2col_nd(x.reshape(-1), shape[0], shape[1], int64(shape[2:]), *geometry, col,
                      batch_major)
    np.testing.assert_array_equal(from_layout(col, expected.shape, batch_major), expected)
    grad = rng.normal(size=expected.shape).astype(np.float32)
    folded = np.full(x.size, np.nan, np.float32)
    kernels.col2im_nd(as_layout(grad, batch_major), shape[0], shape[1], int64(shape[2:]),
                      *geometry, folded, batch_major)
    np.testing.assert_allclose(folded.reshape(shape),
                               reference_col2im(grad, shape, kernel, pad, stride, dilation),
                               rtol=1e-6, atol=1e-6)


def test_single_image_kernels_use_caffe_layout():
    x = np.arange(2 * 4 * 5, dtype=np.float32)
    col = np.empty(2 * 9 * 2 * 3, np.float32)     # kernel 3, pad 1, stride 2 -> 2 x 3
    kernels.im2col(x, 2, 4, 5, 3, 3, 1, 1, 2, 2, 1, 1, col)
    col = col.reshape(2, 3, 3, 2, 3)
    # Channel 1, kernel centre (1, 1): image rows 0, 2 and columns 0, 2, 4.
    np.testing.assert_array_equal(col[1, 1, 1], [[20, 22, 24], [30, 32, 34]])
    # Top-left kernel tap reads the padding for the first row and column.
    np.testing.assert_array_equal(col[0, 0, 0], [[0, 0, 0], [0, 6, 8]])
    folded = np.empty(x.size, np.float32)
    kernels.col2im(np.ones(col.size, np.float32), 2, 4, 5, 3, 3, 1, 1, 2, 2, 1, 1, folded)
    # How many windows cover each pixel: rows 0..3 -> (1, 2, 1, 1), cols 0..4 -> (1,2,1,2,1).
    np.testing.assert_array_equal(folded.reshape(2, 4, 5)[0],
                                  np.outer([1, 2, 1, 1], [1, 2, 1, 2, 1]))


@pytest.mark.parametrize("kernel, pad, stride, dilation", GEOMETRIES_2D[::7])
def test_col2im_is_the_adjoint_of_im2col(image, kernel, pad, stride, dilation):
    n, c, h, w = image.shape
    args = (*kernel, *pad, *stride, *dilation)
    size = c * math.prod(kernel) * n * math.prod(out_shape((h, w), kernel, pad, stride,
                                                           dilation))
    col = np.empty(size, np.float32)
    kernels.im2col_batch(image.reshape(-1), n, c, h, w, *args, col, False)
    y = np.random.default_rng(3).normal(size=size).astype(np.float32)
    folded = np.empty(image.size, np.float32)
    kernels.col2im_batch(y, n, c, h, w, *args, folded, False)
    lhs = np.dot(col.astype(np.float64), y)
    rhs = np.dot(image.reshape(-1).astype(np.float64), folded)
    assert lhs == pytest.approx(rhs, rel=1e-5, abs=1e-5)
