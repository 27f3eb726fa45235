"""Pieces the commands share: reading --gpu, choosing CPU or GPU mode, Caffe's checks."""
from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG


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
