"""The update pipeline (Caffe's SGDSolver::ApplyUpdate), shared by every update rule.

For each iteration: the learning rate, gradient clipping over all params, then per param
normalize (undo iter_size accumulation), regularize (L1/L2 weight decay) and the rule's
``compute_update_value``, which turns the diff into the step; finally ``net.update()``
subtracts the steps from the weights.

An update rule is one per-element body (``*_at_py``, beside its Solver class in sgd.py,
adaptive.py, ...) compiled twice, as the layers do (layers/relu.py): by ``njit`` for a CPU
driver looping over the flat param (``prange`` from ``PARALLEL_MIN`` elements) and by
``device_function`` for a grid-stride CUDA kernel. ``ElementwiseRule`` pairs the two and
``UpdateMixin.run_rule`` picks one by the mode, so both modes run the same float32 operations
in the same order.

``UpdateMixin`` is one of the three parts of ``base.Solver``; it reads what the Solver
declares (``param``, ``net``, ``iter``, ``current_step``, ``history``, and for "plateau"
``smoothed_loss`` and ``plateau``).
"""
from typing import Callable, NamedTuple

import numpy as np
from numba import cuda

from pycaffe_cli import backend
from pycaffe_cli.cuda.launch import launch
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.solvers import lr_policy

_f32 = np.float32
PARALLEL_MIN = 1 << 17  # elements: below this, starting the threads costs more than they save


class ElementwiseRule(NamedTuple):
    """An update rule compiled for both targets, over a flat ``diff`` and its histories.

    ``cpu(diff, *args)`` is the njit driver, ``gpu(n, diff, *args)`` the CUDA kernel; both
    leave the step to subtract in ``diff`` (which holds the gradient on entry).
    """

    cpu: Callable
    gpu: Callable


class UpdateMixin:
    """learning_rate, apply_update and its steps; subclasses give compute_update_value."""

    def learning_rate(self):
        """Caffe's GetLearningRate: the rate for ``self.iter``; tracks ``current_step`` (and
        for "plateau" ``plateau``, from the smoothed loss)."""
        if self.param.lr_policy == "plateau":
            return self._plateau_rate()
        step = lr_policy.step_index(self.param, self.iter)
        if self.param.lr_policy == "multistep" and step != self.current_step:
            LOG.info(f"MultiStep Status: Iteration {self.iter}, step = {step}")
        if self.param.lr_policy in ("step", "multistep"):
            self.current_step = step
        return _f32(lr_policy.learning_rate(self.param, self.iter))

    def _plateau_rate(self):
        """SSD's "plateau": advance its state by this iteration's smoothed loss, log as the
        fork does, and return base_lr * gamma ^ step."""
        param = self.param
        state = self.plateau._replace(current_step=self.current_step)
        state, stepped = lr_policy.advance_plateau(param, self.iter, self.smoothed_loss, state)
        self.plateau, self.current_step = state, state.current_step
        if stepped:
            LOG.info(f"Plateau Status: Iteration {self.iter}, step = {state.current_step}")
        if (param.display and self.iter % param.display == 0
                and state.iter_last_event > self.iter - param.display):
            LOG.info(f"Plateau Status: Iteration {self.iter}, current minimum_loss = "
                     f"{state.minimum_loss:g}")
        return _f32(lr_policy.learning_rate(param, self.iter, state.current_step))

    def apply_update(self):
        """lr, clip, then per param normalize, regularize, compute the step; net.update()."""
        rate = self.learning_rate()
        if self.param.display and self.iter % self.param.display == 0:
            LOG.info(f"Iteration {self.iter}, lr = {float(rate):g}")
        self.clip_gradients()
        for param_id in range(len(self.net.learnable_entries)):
            self.normalize(param_id)
            self.regularize(param_id)
            self.compute_update_value(param_id, rate)
        self.net.update()

    def clip_gradients(self):
        """Scale all diffs by clip / ||diff||_2 when the global L2 norm exceeds clip."""
        clip = _f32(self.param.clip_gradients)
        if clip < 0:
            return
        params = self.net.learnable_params
        l2norm = _f32(np.sqrt(sum(blob.sumsq_diff() for blob in params)))
        if l2norm > clip:
            scale = clip / l2norm
            LOG.info(f"Gradient clipping: scaling down gradients (L2 norm {float(l2norm):g} > "
                     f"{float(clip):g}) by scale factor {float(scale):g}")
            for blob in params:
                blob.scale_diff(scale)

    def normalize(self, param_id):
        """diff *= 1 / iter_size (undo the accumulation over iter_size passes)."""
        if self.param.iter_size == 1:
            return
        self.net.learnable_entries[param_id].blob.scale_diff(_f32(1) / _f32(self.param.iter_size))

    def regularize(self, param_id):
        """L2: diff += decay * data; L1: diff += decay * sign(data);
        decay = weight_decay * decay_mult."""
        entry = self.net.learnable_entries[param_id]
        decay = _f32(self.param.weight_decay) * _f32(entry.decay_mult)
        if not decay:
            return
        blob = entry.blob
        kind = self.param.regularization_type
        if kind not in ("L1", "L2"):
            raise CaffeError(f"Unknown regularization type: {kind} (known types: L1, L2)")
        if self.on_gpu:
            from pycaffe_cli.cuda import math as gpu_math
            data = blob.gpu_data
            if kind == "L2":
                gpu_math.axpy(blob.count(), decay, data, blob.mutable_gpu_diff)
            else:
                launch(_l1_kernel, blob.count(), decay, data, blob.mutable_gpu_diff)
        elif kind == "L2":
            blob.flat_diff[:] += decay * blob.cpu_data.ravel()
        else:
            blob.flat_diff[:] += decay * np.sign(blob.cpu_data.ravel())

    def local_rate(self, param_id, rate):
        """rate * lr_mult of param ``param_id``, in float32."""
        return _f32(rate) * _f32(self.net.learnable_entries[param_id].lr_mult)

    def compute_update_value(self, param_id, rate):
        """Turn the param's diff into the step to subtract (the update rule)."""
        raise NotImplementedError

    @property
    def on_gpu(self):
        """Whether updates run on the device (Caffe: the mode, as in SGDSolver::Regularize)."""
        return backend.mode() is backend.Mode.GPU

    def run_rule(self, rule, diff, *args):
        """Run ``rule`` (an ElementwiseRule) over ``diff`` (from ``diff_of``) on the mode's
        target; ``args`` are histories (from ``history_of``) and float32 scalars."""
        if self.on_gpu:
            launch(rule.gpu, diff.size, diff, *args)
        else:
            rule.cpu(diff, *args)

    def diff_of(self, param_id):
        """The flat diff of learnable param ``param_id``, on the device in GPU mode."""
        blob = self.net.learnable_entries[param_id].blob
        return blob.mutable_gpu_diff if self.on_gpu else blob.flat_diff

    def history_of(self, param_id, which=0):
        """The flat history array ``which`` (0 or 1) of learnable param ``param_id``, on the
        device in GPU mode."""
        blob = self.history[which * len(self.net.learnable_entries) + param_id]
        return blob.mutable_gpu_data if self.on_gpu else blob.flat_data


@cuda.jit(cache=True)
def _l1_kernel(n, decay, data, diff):
    """diff += decay * sign(data) (Caffe's gpu sign + axpy, fused)."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        value = data[i]
        if value > 0:
            diff[i] += decay
        elif value < 0:
            diff[i] -= decay
