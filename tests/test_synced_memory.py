"""SyncedMemory head states and the Blob operations that run where the data is."""
import numpy as np
import pytest

from pycaffe_cli.blob import Blob
from pycaffe_cli.cuda import views
from pycaffe_cli.synced_memory import Head, SyncedMemory, SyncedMemoryView
from tests.numerics import close_to


def test_host_access_allocates_zeros_and_never_touches_the_device():
    memory = SyncedMemory(5)
    assert memory.head is Head.UNINIT
    np.testing.assert_array_equal(memory.host(), np.zeros(5, np.float32))
    assert memory.head is Head.AT_CPU
    assert memory._device is None


def test_device_first_access_gives_zeros_on_the_device(gpu_mode):
    memory = SyncedMemory(4)
    np.testing.assert_array_equal(memory.device().copy_to_host(), np.zeros(4))
    assert memory.head is Head.AT_GPU
    np.testing.assert_array_equal(memory.host(), np.zeros(4))
    assert memory.head is Head.SYNCED


def test_heads_follow_caffes_table(gpu_mode):
    memory = SyncedMemory(3)
    memory.mutable_host()[:] = [1, 2, 3]
    assert memory.head is Head.AT_CPU
    device = memory.device()                      # copies host -> device
    assert memory.head is Head.SYNCED
    np.testing.assert_array_equal(device.copy_to_host(), [1, 2, 3])
    memory.mutable_device().copy_to_device(np.array([4, 5, 6], np.float32))
    assert memory.head is Head.AT_GPU
    np.testing.assert_array_equal(memory.host(), [4, 5, 6])   # copies device -> host
    assert memory.head is Head.SYNCED
    memory.host()[0] = 99                         # a read access: the device copy stays
    assert memory.head is Head.SYNCED
    memory.mutable_host()[1] = 7
    assert memory.head is Head.AT_CPU
    np.testing.assert_array_equal(memory.device().copy_to_host(), [99, 7, 6])


def test_set_host_adopts_an_array_and_checks_it():
    memory = SyncedMemory(3)
    array = np.arange(3, dtype=np.float32)
    memory.set_host(array)
    assert memory.host() is array and memory.head is Head.AT_CPU
    with pytest.raises(ValueError):
        memory.set_host(np.zeros(4, np.float32))
    with pytest.raises(ValueError):
        memory.set_host(np.zeros(3, np.float64))


def test_async_push_leaves_both_copies_valid(gpu_mode):
    from pycaffe_cli.cuda import memory as device_memory
    memory = SyncedMemory(4)
    memory.set_host(np.array([1, 2, 3, 4], np.float32))
    stream = device_memory.stream()
    memory.async_push(stream)
    stream.synchronize()
    assert memory.head is Head.SYNCED
    np.testing.assert_array_equal(memory.device().copy_to_host(), [1, 2, 3, 4])


def test_read_views_are_read_only_and_do_not_stale_the_device(gpu_mode):
    blob = Blob((2, 2))
    blob.mutable_gpu_data.copy_to_device(np.arange(4, dtype=np.float32))
    view = blob.cpu_data
    np.testing.assert_array_equal(view, [[0, 1], [2, 3]])
    with pytest.raises(ValueError):
        view[0, 0] = 5
    assert blob.data_memory.head is Head.SYNCED


def _filled_blob(data, diff):
    blob = Blob(np.shape(data))
    blob.data[...] = data
    blob.diff[...] = diff
    return blob


@pytest.mark.parametrize("on_device", [False, True])
def test_blob_maths_run_where_the_data_is(on_device, gpu_mode):
    rng = np.random.default_rng(3)
    data = rng.normal(size=(3, 5)).astype(np.float32)
    diff = rng.normal(size=(3, 5)).astype(np.float32)
    blob = _filled_blob(data, diff)
    if on_device:
        blob.mutable_gpu_data, blob.mutable_gpu_diff  # noqa: B018  (moves both heads to the device)
        assert blob.data_memory.head is Head.AT_GPU
    assert blob.asum_data() == pytest.approx(np.abs(data.astype(np.float64)).sum(), rel=1e-12)
    assert blob.asum_diff() == pytest.approx(np.abs(diff.astype(np.float64)).sum(), rel=1e-12)
    assert blob.sumsq_data() == pytest.approx((data.astype(np.float64) ** 2).sum(), rel=1e-12)
    assert blob.sumsq_diff() == pytest.approx((diff.astype(np.float64) ** 2).sum(), rel=1e-12)
    blob.scale_diff(0.5)
    blob.update()
    assert blob.data_memory.on_device is on_device
    close_to(blob.cpu_data, data - np.float32(0.5) * diff, rtol=1e-6)
    blob.zero_diff()
    np.testing.assert_array_equal(blob.cpu_diff, np.zeros((3, 5)))


def test_shared_blobs_share_the_synced_memory(gpu_mode):
    a = _filled_blob(np.ones((2, 3)), np.zeros((2, 3)))
    b = Blob((6,))
    b.share_data(a)
    b.mutable_gpu_data.copy_to_device(np.full(6, 2, np.float32))
    np.testing.assert_array_equal(a.cpu_data, np.full((2, 3), 2))


def test_copy_from_on_the_device(gpu_mode):
    source = _filled_blob(np.arange(6).reshape(2, 3), np.ones((2, 3)))
    target = Blob((2, 3))
    target.copy_from(source)
    target.copy_from(source, copy_diff=True)
    assert target.data_memory.head is Head.AT_GPU
    np.testing.assert_array_equal(target.cpu_data, np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(target.cpu_diff, np.ones((2, 3)))


def test_a_view_is_a_run_of_its_parent():
    parent = SyncedMemory(6)
    view = SyncedMemoryView(parent, 2, 3)
    view.mutable_host()[...] = [1, 2, 3]
    np.testing.assert_array_equal(parent.host(), [0, 0, 1, 2, 3, 0])
    before = view.version
    parent.mutable_host()[3] = 9
    assert view.version == (parent.version, 2) != before  # a write to either is seen by both
    np.testing.assert_array_equal(view.host(), [1, 9, 3])
    assert view.head is parent.head and view.allocated
    with pytest.raises(ValueError):
        SyncedMemoryView(parent, 4, 3)
    with pytest.raises(ValueError):
        view.set_host(np.zeros(3, np.float32))


def test_device_views_cover_the_count_after_a_shrink(gpu_mode):
    blob = _filled_blob(np.arange(6).reshape(2, 3), np.zeros((2, 3)))
    whole = blob.data_memory.device()
    assert blob.gpu_data is whole            # exactly the count: the array itself
    blob.reshape((4,))                       # capacity kept, as Caffe's Reshape does
    assert blob.gpu_data.shape == (4,) and blob.mutable_gpu_diff.shape == (4,)
    np.testing.assert_array_equal(blob.gpu_data.copy_to_host(), [0, 1, 2, 3])


def test_device_view_of_a_run_slices_only_where_it_must(gpu_mode):
    parent = SyncedMemory(6)
    parent.mutable_host()[...] = np.arange(6)
    assert SyncedMemoryView(parent, 0, 6).device() is parent.device()
    np.testing.assert_array_equal(SyncedMemoryView(parent, 0, 4).device().copy_to_host(),
                                  [0, 1, 2, 3])
    np.testing.assert_array_equal(SyncedMemoryView(parent, 2, 4).device().copy_to_host(),
                                  [2, 3, 4, 5])


def test_flat_views_return_the_array_where_nothing_is_cut():
    array = np.arange(5, dtype=np.float32)
    assert views.first(array, 5) is array and views.starting_at(array, 0) is array
    np.testing.assert_array_equal(views.first(array, 3), [0, 1, 2])
    np.testing.assert_array_equal(views.starting_at(array, 2), [2, 3, 4])
