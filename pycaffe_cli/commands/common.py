"""Pieces the commands share: reading --gpu, choosing CPU or GPU mode, Caffe's checks, building
a net at the batch size --batch asks for."""
from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG

# The layer parameters whose batch_size --batch sets (Data, ImageData, HDF5Data, MemoryData,
# WindowData).
BATCH_SIZE_PARAMS = ("data_param", "image_data_param", "hdf5_data_param", "memory_data_param",
                     "window_data_param")


def cuda_device_count():
    """How many CUDA devices numba sees (0 when there is no usable CUDA)."""
    if not backend.cuda_available():
        return 0
    from numba import cuda
    return len(cuda.gpus)


def parse_gpus(flag):
    """The device ids ``--gpu`` names: "" -> [], "all" -> every device, "0,2" -> [0, 2]."""
    if not flag:
        return []
    if flag == "all":
        count = cuda_device_count()
        if count == 0:
            backend.set_mode_gpu(0)  # raises the clear "no CUDA device" error
        return list(range(count))
    gpus = []
    for item in flag.split(","):
        try:
            gpus.append(int(item))
        except ValueError:
            raise CaffeError(f'--gpu: "{item}" is not a device id (give device ids '
                             'separated by "," or "all")') from None
        if gpus[-1] < 0:
            raise CaffeError(f"--gpu: device id {gpus[-1]} is negative")
    return gpus


def use_single_device(gpu_flag):
    """Set CPU or GPU mode for the single-device commands (test, time), logging as Caffe."""
    gpus = parse_gpus(gpu_flag)
    while len(gpus) > 1:
        LOG.info(f"Not using GPU #{gpus.pop()} for single-GPU function")
    if gpus:
        LOG.info(f"Use GPU with device ID {gpus[0]}")
        backend.set_mode_gpu(gpus[0])
    else:
        LOG.info("Use CPU.")
        backend.set_mode_cpu()


def require(value, message):
    """Caffe's CHECK_GT(FLAGS_x.size(), 0) << message."""
    if not value:
        raise CaffeError(message)


def with_batch(param, batch):
    """A copy of the NetParameter ``param`` whose batch size is ``batch``: the first axis of
    every Input layer shape, legacy net input (``input_shape`` / ``input_dim``) and DummyData
    shape (or legacy ``num``), and the ``batch_size`` of the data layers. Python layers and
    anything else that reads its batch size from elsewhere are left as they are."""
    from pycaffe_cli.proto import caffe_pb2
    copy = caffe_pb2.NetParameter()
    copy.CopyFrom(param)
    shapes = list(copy.input_shape)
    for i in range(0, len(copy.input_dim), 4):
        copy.input_dim[i] = batch
    for layer in copy.layer:
        if layer.type == "Input":
            shapes += layer.input_param.shape
        elif layer.type == "DummyData":
            shapes += layer.dummy_data_param.shape
            nums = layer.dummy_data_param.num
            nums[:] = [batch] * len(nums)
        for field in BATCH_SIZE_PARAMS:
            if layer.HasField(field):
                getattr(layer, field).batch_size = batch
    for shape in shapes:
        if shape.dim:
            shape.dim[0] = batch
    return copy


def net_from_file(path, phase, level=0, stages=(), batch=None):
    """``Net.from_file``, with the batch size set to ``batch`` (see with_batch) when given."""
    from pycaffe_cli.net.net import Net
    if batch is None:
        return Net.from_file(path, phase, level, stages)
    LOG.info(f"Setting the batch size to {batch} (--batch)")
    return Net.from_file(path, phase, level, stages, edit=lambda param: with_batch(param, batch))
