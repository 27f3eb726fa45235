"""Plain-numpy references for the pooling and LRN kernels: explicit window loops, float64.

Windows follow Caffe's pooling_layer.cpp: output (ph, pw) covers rows [ph*s - pad,
ph*s - pad + k) clipped to the image; AVE divides by the window clipped to the padded image.
"""
import numpy as np


def windows(height, width, pooled, kernel, stride, pad):
    """Yield (ph, pw, rows slice, cols slice, pool_size) for every output position."""
    for ph in range(pooled[0]):
        for pw in range(pooled[1]):
            h0, w0 = ph * stride[0] - pad[0], pw * stride[1] - pad[1]
            size = ((min(h0 + kernel[0], height + pad[0]) - h0)
                    * (min(w0 + kernel[1], width + pad[1]) - w0))
            rows = slice(max(h0, 0), min(h0 + kernel[0], height))
            cols = slice(max(w0, 0), min(w0 + kernel[1], width))
            yield ph, pw, rows, cols, size


def max_pool(x, pooled, kernel, stride, pad):
    """(top, argmax index h * W + w) for x of shape (P, H, W)."""
    planes, height, width = x.shape
    top = np.zeros((planes,) + tuple(pooled))
    mask = np.zeros((planes,) + tuple(pooled), np.int64)
    for ph, pw, rows, cols, _ in windows(height, width, pooled, kernel, stride, pad):
        patch = x[:, rows, cols].reshape(planes, -1)
        first = np.argmax(patch, axis=1)  # first maximum in row-major order, as Caffe's >
        top[:, ph, pw] = patch[np.arange(planes), first]
        n_cols = cols.stop - cols.start
        mask[:, ph, pw] = (rows.start + first // n_cols) * width + cols.start + first % n_cols
    return top, mask


def route(top_diff, index, shape):
    """Scatter each top diff to the flat in-plane ``index`` (max / stochastic backward)."""
    planes = shape[0]
    out = np.zeros((planes, shape[1] * shape[2]))
    for p in range(planes):
        np.add.at(out[p], index[p].ravel(), top_diff[p].ravel().astype(np.float64))
    return out.reshape(shape)


def ave_pool(x, pooled, kernel, stride, pad):
    planes, height, width = x.shape
    top = np.zeros((planes,) + tuple(pooled))
    for ph, pw, rows, cols, size in windows(height, width, pooled, kernel, stride, pad):
        top[:, ph, pw] = x[:, rows, cols].astype(np.float64).sum(axis=(1, 2)) / size
    return top


def ave_pool_backward(top_diff, shape, kernel, stride, pad):
    out = np.zeros(shape)
    for ph, pw, rows, cols, size in windows(shape[1], shape[2], top_diff.shape[1:], kernel,
                                            stride, pad):
        out[:, rows, cols] += top_diff[:, ph, pw, None, None] / size
    return out


def sto_pool_test(x, pooled, kernel, stride):
    planes, height, width = x.shape
    top = np.zeros((planes,) + tuple(pooled))
    for ph, pw, rows, cols, _ in windows(height, width, pooled, kernel, stride, (0, 0)):
        patch = x[:, rows, cols].astype(np.float64)
        top[:, ph, pw] = (patch ** 2).sum(axis=(1, 2)) / patch.sum(axis=(1, 2))
    return top


def lrn_across(x, size, alpha, beta, k):
    """Caffe's ReferenceLRNForward, ACROSS_CHANNELS, for x of shape (N, C, H, W)."""
    x = x.astype(np.float64)
    channels = x.shape[1]
    pre = (size - 1) // 2
    scale = np.empty_like(x)
    for c in range(channels):
        window = x[:, max(c - pre, 0):min(c + pre + 1, channels)]
        scale[:, c] = k + alpha / size * (window ** 2).sum(axis=1)
    return x * scale ** -beta, scale


def lrn_across_backward(x, top_diff, size, alpha, beta, k):
    """The analytic ACROSS_CHANNELS gradient, written out with explicit channel windows."""
    x = x.astype(np.float64)
    top, scale = lrn_across(x, size, alpha, beta, k)
    ratio = top_diff * top / scale
    channels = x.shape[1]
    pre = (size - 1) // 2
    out = top_diff * scale ** -beta
    for c in range(channels):
        window = ratio[:, max(c - pre, 0):min(c + pre + 1, channels)].sum(axis=1)
        out[:, c] -= 2.0 * alpha * beta / size * x[:, c] * window
    return out


def lrn_within(x, size, alpha, beta):
    """Caffe's ReferenceLRNForward, WITHIN_CHANNEL, for x of shape (N, C, H, W)."""
    x = x.astype(np.float64)
    height, width = x.shape[2:]
    pre = (size - 1) // 2
    top = np.empty_like(x)
    for h in range(height):
        for w in range(width):
            window = x[:, :, max(h - pre, 0):min(h + pre + 1, height),
                       max(w - pre, 0):min(w + pre + 1, width)]
            scale = 1.0 + alpha / size ** 2 * (window ** 2).sum(axis=(2, 3))
            top[:, :, h, w] = x[:, :, h, w] * scale ** -beta
    return top
