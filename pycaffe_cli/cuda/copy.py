"""Copies between blobs on the GPU: strided blocks and indexed rows (numba.cuda).

Shared by the shape layers:

* ``strided_copy``: dst[dst_base + sum_k i_k t_k] = src[src_base + sum_k i_k s_k] over an
  N-d index space (shape, source strides s, destination strides t); one thread per element.
  Concat and Slice copy (outer, n, inner) blocks in and out of a wider axis (``copy_block``),
  Crop copies an offset window, Tile repeats the bottom (a stride-0 axis, ``tile``).
  Axes are coalesced on the host first (size-1 axes dropped, neighbours that are contiguous
  in both arrays merged), so most copies run with two or three axes.
* ``gather_rows``: dst[j, :] = src[index[j], :] (BatchReindex, Filter, Embed forward);
  an index outside [0, rows) gives a row of zeros instead of reading out of bounds.
* ``RowOrder.gather_add_rows``: dst[r, :] (+)= sum of src[j, :] over j with index[j] == r, in
  increasing j (BatchReindex, Filter and Embed backward). No atomics: the indices are first
  sorted on the device (a stable rank sort, one thread per index), then one thread per
  destination element finds its run of sources by binary search and adds them in order, so
  the float32 sums equal numpy's ``np.add.at`` bit for bit.

Indices are float32 device arrays (Caffe keeps them in blobs), truncated toward zero.
"""
import numpy as np
from numba import cuda

from pycaffe_cli.cuda import memory
from pycaffe_cli.cuda.launch import launch


# --- strided blocks -----------------------------------------------------------------------
@cuda.jit(cache=True)
def _strided_copy_kernel(n, shape, src, src_base, src_strides, dst, dst_base, dst_strides):
    for index in range(cuda.grid(1), n, cuda.gridsize(1)):
        rest = index
        s = src_base
        d = dst_base
        for axis in range(len(shape) - 1, -1, -1):
            position = rest % shape[axis]
            rest //= shape[axis]
            s += position * src_strides[axis]
            d += position * dst_strides[axis]
        dst[d] = src[s]


def coalesce(shape, src_strides, dst_strides):
    """The same copy over fewer axes: size-1 axes dropped, and an axis merged into the next
    one where both arrays step over it as over one longer axis."""
    kept = [(n, s, t) for n, s, t in zip(shape, src_strides, dst_strides) if n != 1]
    if not kept:
        return (1,), (0,), (0,)
    merged = [kept[-1]]
    for n, s, t in reversed(kept[:-1]):
        inner_n, inner_s, inner_t = merged[-1]
        if s == inner_s * inner_n and t == inner_t * inner_n:
            merged[-1] = (n * inner_n, inner_s, inner_t)
        else:
            merged.append((n, s, t))
    merged.reverse()
    return tuple(tuple(int(v) for v in axis) for axis in zip(*merged))


def contiguous_strides(shape):
    """Row-major element strides of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def strided_copy(shape, src, src_base, src_strides, dst, dst_base, dst_strides):
    """Copy the N-d index space ``shape`` from flat ``src`` to flat ``dst`` (see module doc)."""
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return
    shape, src_strides, dst_strides = coalesce(shape, src_strides, dst_strides)
    launch(_strided_copy_kernel, count, shape, src, int(src_base), src_strides, dst,
           int(dst_base), dst_strides)


def copy_block(src, dst, outer, size, inner, src_axis, src_offset, dst_axis, dst_offset):
    """dst (outer, dst_axis, inner)[:, dst_offset:+size] = src (outer, src_axis, inner)
    [:, src_offset:+size]: Concat's and Slice's copies, both ways."""
    strided_copy((outer, size, inner), src, src_offset * inner,
                 (src_axis * inner, inner, 1), dst, dst_offset * inner,
                 (dst_axis * inner, inner, 1))


def tile(src, dst, outer, tiles, inner):
    """dst (outer, tiles, inner)[:, t] = src (outer, inner) for every t."""
    strided_copy((outer, tiles, inner), src, 0, (inner, 0, 1), dst, 0,
                 (tiles * inner, inner, 1))


# --- indexed rows -------------------------------------------------------------------------
@cuda.jit(cache=True)
def _gather_rows_kernel(n, index, rows, inner, src, dst):
    for element in range(cuda.grid(1), n, cuda.gridsize(1)):
        row = int(index[element // inner])
        if 0 <= row < rows:
            dst[element] = src[row * inner + element % inner]
        else:
            dst[element] = 0


@cuda.jit(cache=True)
def _sort_index_kernel(n, index, order):
    """order[rank of j] = j, ranking by (row, j): a stable sort of the truncated indices."""
    for j in range(cuda.grid(1), n, cuda.gridsize(1)):
        row = int(index[j])
        rank = 0
        for other in range(n):
            other_row = int(index[other])
            if other_row < row or (other_row == row and other < j):
                rank += 1
        order[rank] = j


@cuda.jit(cache=True)
def _gather_add_rows_kernel(n, index, order, count, inner, src, accumulate, dst):
    for element in range(cuda.grid(1), n, cuda.gridsize(1)):
        row = element // inner
        column = element % inner
        low = 0
        high = count
        while low < high:  # the first sorted position whose row is >= this row
            middle = (low + high) // 2
            if int(index[order[middle]]) < row:
                low = middle + 1
            else:
                high = middle
        total = dst[element] if accumulate else np.float32(0)
        while low < count and int(index[order[low]]) == row:
            total += src[order[low] * inner + column]
            low += 1
        dst[element] = total


def gather_rows(index, count, rows, inner, src, dst):
    """dst (count, inner)[j] = src (rows, inner)[int(index[j])], zeros for a bad index."""
    launch(_gather_rows_kernel, count * inner, index, rows, inner, src, dst)


class RowOrder:
    """The device buffer that sorts an index vector for ``gather_add_rows`` (grown on demand;
    keep one per layer)."""

    def __init__(self):
        self._order = None

    def gather_add_rows(self, index, count, rows, inner, src, dst, accumulate):
        """dst (rows, inner)[r] = (dst[r] if accumulate else 0) + sum of src (count, inner)[j]
        over j with int(index[j]) == r, added in increasing j."""
        if rows * inner == 0:
            return
        if count == 0:
            if not accumulate:
                memory.fill(dst[:rows * inner], 0)
            return
        if self._order is None or self._order.size < count:
            self._order = memory.empty(count, np.int32)
        launch(_sort_index_kernel, count, index, self._order)
        launch(_gather_add_rows_kernel, rows * inner, index, self._order, count, inner, src,
               bool(accumulate), dst)
