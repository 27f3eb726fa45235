"""``pycaffe device_query``: GPU diagnostics in the wording of Caffe's ``Caffe::DeviceQuery``."""
from pycaffe_cli import backend
from pycaffe_cli.commands import subcommand
from pycaffe_cli.commands.common import cuda_device_count, parse_gpus
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG


@subcommand("device_query", summary="show GPU diagnostic information", flags=("gpu",))
def device_query(gpu):
    """Show the properties of the CUDA devices --gpu names (all devices when not given)."""
    LOG.info(f"Querying GPUs {gpu or ''}")
    if not backend.cuda_available():
        raise CaffeError("device_query: no CUDA device is available (numba.cuda sees none)")
    gpus = parse_gpus(gpu) if gpu else list(range(cuda_device_count()))
    count = cuda_device_count()
    for device_id in gpus:
        if device_id >= count:
            raise CaffeError(f"device_query: no CUDA device {device_id} (this machine has "
                             f"{count})")
        for line in describe_device(device_properties(device_id)):
            LOG.info(line)
    return 0


def device_properties(device_id):
    """A dict of the device's properties, read through numba.cuda."""
    from numba import cuda
    gpu = cuda.gpus[device_id]  # proxies the Device's attributes (CU_DEVICE_ATTRIBUTE_*)
    with gpu:
        total = cuda.current_context().get_memory_info()[1]

        def attr(key, default=0):
            return getattr(gpu, key, default)

        name = attr("name", "CUDA simulator")
        return {
            "id": device_id,
            "major": gpu.compute_capability[0],
            "minor": gpu.compute_capability[1],
            "name": name.decode() if isinstance(name, bytes) else name,
            "total_memory": total,
            "shared_per_block": attr("MAX_SHARED_MEMORY_PER_BLOCK"),
            "registers_per_block": attr("MAX_REGISTERS_PER_BLOCK"),
            "warp_size": attr("WARP_SIZE"),
            "memory_pitch": attr("MAX_PITCH"),
            "threads_per_block": attr("MAX_THREADS_PER_BLOCK"),
            "block_dims": [attr(f"MAX_BLOCK_DIM_{axis}") for axis in "XYZ"],
            "grid_dims": [attr(f"MAX_GRID_DIM_{axis}") for axis in "XYZ"],
            "clock_rate": attr("CLOCK_RATE"),
            "constant_memory": attr("TOTAL_CONSTANT_MEMORY"),
            "texture_alignment": attr("TEXTURE_ALIGNMENT"),
            "concurrent_copy": attr("GPU_OVERLAP", attr("ASYNC_ENGINE_COUNT")),
            "multiprocessors": attr("MULTIPROCESSOR_COUNT"),
            "kernel_timeout": attr("KERNEL_EXEC_TIMEOUT"),
        }


def describe_device(p):
    """Caffe's DeviceQuery lines for a property dict."""
    def yes_no(flag):
        return "Yes" if flag else "No"
    return [
        f"Device id:                     {p['id']}",
        f"Major revision number:         {p['major']}",
        f"Minor revision number:         {p['minor']}",
        f"Name:                          {p['name']}",
        f"Total global memory:           {p['total_memory']}",
        f"Total shared memory per block: {p['shared_per_block']}",
        f"Total registers per block:     {p['registers_per_block']}",
        f"Warp size:                     {p['warp_size']}",
        f"Maximum memory pitch:          {p['memory_pitch']}",
        f"Maximum threads per block:     {p['threads_per_block']}",
        "Maximum dimension of block:    " + ", ".join(str(d) for d in p["block_dims"]),
        "Maximum dimension of grid:     " + ", ".join(str(d) for d in p["grid_dims"]),
        f"Clock rate:                    {p['clock_rate']}",
        f"Total constant memory:         {p['constant_memory']}",
        f"Texture alignment:             {p['texture_alignment']}",
        f"Concurrent copy and execution: {yes_no(p['concurrent_copy'])}",
        f"Number of multiprocessors:     {p['multiprocessors']}",
        f"Kernel execution timeout:      {yes_no(p['kernel_timeout'])}",
    ]
