"""pycaffe: BVLC Caffe rebuilt in Python."""
import os

# numba's OpenMP workers and OpenBLAS's workers both spin after each call by default, and on a
# small machine each stalls the other: LeNet forward-backward took 46 ms instead of 12 ms on
# 2 cores. These must be set before numpy loads OpenBLAS; a user's own settings win.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
