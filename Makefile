# pycaffe: set-up, demo, tests. Every target creates the virtual environment on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# pycaffe's device flag for the demo: empty (CPU) or --gpu N (make demo DEVICE="--gpu 1").
DEVICE =

.PHONY: setup setup-gpu setup-extra demo demo-gpu demo-mlp demo-detection test test-fast test-gpu test-gpu-skips proto bench \
	clean clean-numba-cache

# A strict editable install links the packages' files into build/__editable__.* and puts that
# folder on sys.path, so `import caffe` finds the real package even where the working
# directory holds a folder named caffe/ (a BVLC checkout); the default editable mode's import
# hook comes after the working directory. Added or removed source files need the links made
# again: the stamp depends on the source folders.
INSTALL := $(BIN)/pip install --quiet --config-settings editable_mode=strict -e
SOURCE_DIRS := $(shell find $(CURDIR)/pycaffe_cli $(CURDIR)/layers $(CURDIR)/proto -type d \
	-not -name __pycache__)

setup: $(STAMP)

$(STAMP): setup.cfg pyproject.toml $(SOURCE_DIRS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(INSTALL) '.[test]'
	touch $(STAMP)

# The main job: generate the digits data set locally, train LeNet on it, score the result.
demo: setup
	rm -rf data/digits
	$(BIN)/python scripts/make_digits.py --out data/digits
	$(BIN)/pycaffe train --solver models/lenet/lenet_solver.prototxt $(DEVICE)
	$(BIN)/pycaffe test --model models/lenet/lenet_train_test.prototxt \
		--weights data/digits/lenet_iter_2000.caffemodel --iterations 20 $(DEVICE)

# The main job on GPU 0 (adds the gpu extra first); its accuracy should be make demo's.
demo-gpu: DEVICE = --gpu 0
demo-gpu: setup-gpu demo

# A smaller job: a perceptron on generated HDF5 data.
demo-mlp: setup
	$(BIN)/python scripts/make_hdf5_demo.py --out data/mlp
	$(BIN)/pycaffe train --solver models/mlp/solver.prototxt
	$(BIN)/pycaffe test --model models/mlp/train_test.prototxt \
		--weights data/mlp/mlp_iter_2000.caffemodel --iterations 10

# Object detection: generate the shapes data set, train a small SSD on it, report its mAP.
demo-detection: setup
	rm -rf data/shapes
	$(BIN)/python scripts/make_shapes.py --out data/shapes
	$(BIN)/pycaffe train --solver models/ssd_shapes/solver.prototxt $(DEVICE)
	$(BIN)/pycaffe test --model models/ssd_shapes/test.prototxt \
		--weights data/shapes/ssd_shapes_iter_1000.caffemodel --iterations 10 \
		--ap_version 11point $(DEVICE)

# The whole suite, slow end-to-end runs included, then the numerical tests under the other
# OpenBLAS kernels this CPU can run, one BLAS thread, and numba code for AVX2-only CPUs
# (scripts/test_kernels): what CI runs.
test: setup
	$(BIN)/python -m pytest -q -n auto --dist worksteal
	$(BIN)/python scripts/test_kernels

# Everything but the slow end-to-end runs.
test-fast: setup
	$(BIN)/python -m pytest -q -n auto --dist worksteal -m "not slow"

# The suite on a real NVIDIA GPU instead of numba's CUDA simulator (adds the gpu extra first).
test-gpu: setup-gpu
	NUMBA_ENABLE_CUDASIM=0 $(BIN)/python -m pytest -q

# Without the CUDA simulator and without a device, every GPU test skips with its reason and every
# CPU test still runs: tests/check_gpu_skips.py re-runs the whole suite that way in a child pytest
# (so it is not part of `make test`; pytest collects it only when it is named).
test-gpu-skips: setup
	$(BIN)/python -m pytest -q tests/check_gpu_skips.py

# The gpu extra (numba-cuda, CuPy) in the same virtual environment.
setup-gpu: setup
	$(INSTALL) '.[gpu,test]'

# Another optional extra in the same virtual environment: make setup-extra EXTRA=mpi (or plot,
# bench, draw, gpu-cu13).
setup-extra: setup
	$(INSTALL) '.[$(EXTRA),test]'

# Regenerate proto/caffe_pb2.py from proto/caffe.proto (needs the dev extra: grpcio-tools).
proto: setup
	$(INSTALL) '.[dev]'
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=proto proto/caffe.proto

# CPU benchmark (scripts/bench): pycaffe time on LeNet and CaffeNet against numpy's GEMM rate.
bench: setup
	$(BIN)/python scripts/bench

# numba's on-disk cache is checked against each function's own file only: a kernel that calls
# one from another file keeps the callee's old code after that file changes. Run this after
# changing a kernel, before timing or testing it through its callers.
clean-numba-cache:
	find . -path ./$(VENV) -prune -o -name '*.nbi' -print -o -name '*.nbc' -print | xargs rm -f

clean: clean-numba-cache
	rm -rf $(VENV) build *.egg-info .pytest_cache data
