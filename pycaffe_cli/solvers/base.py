"""The solver loop (Caffe's Solver + the shared half of SGDSolver) and the solver registry.

A ``Solver`` owns the train net and the test nets and runs Caffe's Step/Solve/Test loop with
Caffe's log lines. Every Caffe solver type derives from SGDSolver, whose ``ApplyUpdate`` is the
same for all of them; only ``ComputeUpdateValue`` differs. So here ``apply_update`` lives in
the base class and each update-rule family (sgd.py, adagrad.py, ...) overrides
``compute_update_value(param_id, rate)`` and says how many history blobs it keeps per param.

Numbers follow Caffe's types: losses, rates and update arithmetic are float32; log lines
format them like C++ ostreams (``f"{x:g}"``).
"""
import time

import numpy as np

from pycaffe_cli import backend, net_weights
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.proto_echo import solver_text
from pycaffe_cli.solvers import lr_policy, state as state_io
from pycaffe_cli.solvers.divergence import DivergenceWatch
from pycaffe_cli.solvers.nets import build_test_nets, build_train_net, check_train_net_source

_f32 = np.float32
ACTIONS = ("none", "snapshot", "stop")
_SOLVERS = {}


def register_solver(type_name):
    """Class decorator: make a Solver subclass selectable by ``type: "<type_name>"``."""
    def decorate(cls):
        if type_name in _SOLVERS:
            raise RuntimeError(f"solver type {type_name!r} registered twice")
        _SOLVERS[type_name] = cls
        cls.type = type_name
        return cls
    return decorate


def registered_solver_types():
    import pycaffe_cli.solvers  # noqa: F401  (imports every update-rule module)
    return sorted(_SOLVERS)


def solver_class(type_name):
    """The Solver subclass registered for ``type_name``; CaffeError listing the known ones."""
    known = registered_solver_types()
    if type_name not in _SOLVERS:
        raise CaffeError(f'Unknown solver type: "{type_name}" (known types: '
                         f'{", ".join(known)})')
    return _SOLVERS[type_name]


def cuda_updates():
    """The device update rules (imported only in GPU mode)."""
    from pycaffe_cli.solvers import cuda_updates as module
    return module


def _g(value):
    """C++ ostream formatting of a number (6 significant digits, %g)."""
    return f"{float(value):g}"


class Solver:
    """Trains a net with Caffe's loop; subclasses supply the update rule.

    Args:
        param: a (current-format) caffe.SolverParameter.
        solver_path: the solver file, named in errors. The snapshot prefix is used as
            given: ``read_solver`` has already completed it (Caffe's
            UpgradeSnapshotPrefixProperty runs once, when the file is read).
        action_callback: called where Caffe polls for signals; returns "none", "snapshot"
            or "stop" (each request once, as Caffe's signal handler does).

    Attributes:
        net, test_nets: the train Net and the list of test Nets.
        iter: number of updates done so far; current_step: the lr policy's step index.
        history: the update rule's history Blobs (``history_per_param`` per learnable param,
            grouped as Caffe orders them in the solverstate).
    """

    type = None
    history_per_param = 1

    def __init__(self, param, solver_path=None, action_callback=None):
        self.param = caffe_pb2.SolverParameter()
        self.param.CopyFrom(param)
        LOG.info("Initializing solver from parameters: \n" + solver_text(self.param))
        self.action_callback = action_callback
        self.callbacks = []   # objects with on_start() and on_gradients_ready() (Caffe's)
        self.requested_early_exit = False
        try:
            self._check_param()
        except CaffeError as error:
            raise CaffeError(f"{solver_path}: {error}" if solver_path else str(error)) from None
        state_io.check_snapshot_write_permissions(self.param)
        if self.param.random_seed >= 0:
            backend.set_random_seed(self.param.random_seed)
        self.net = build_train_net(self.param)
        self.test_nets = build_test_nets(self.param)
        self.mean_scores = [[] for _ in self.test_nets]
        LOG.info("Solver scaffolding done.")
        self.iter = 0
        self.current_step = 0
        self.smoothed_loss = _f32(0)
        self._losses = []
        self._divergence = DivergenceWatch()   # one WARNING at the first non-finite loss
        self.history = [Blob(blob.shape) for _ in range(self.history_per_param)
                        for blob in self.net.learnable_params]

    # --- parameter checks ----------------------------------------------------------------
    def _check_param(self):
        param = self.param
        check_train_net_source(param)
        if param.average_loss < 1:
            raise CaffeError(f"average_loss should be non-negative (>= 1, got "
                             f"{param.average_loss}).")
        if param.iter_size < 1:
            raise CaffeError(f"iter_size must be >= 1 (got {param.iter_size})")
        lr_policy.check_policy(param)
        if param.weight_decay and param.regularization_type not in ("L1", "L2"):
            raise CaffeError(f"Unknown regularization type: {param.regularization_type} "
                             "(known types: L1, L2)")
        self.check_solver_param(param)

    def check_solver_param(self, param):
        """Update-rule specific checks (Caffe's constructor_sanity_check); CaffeError if bad."""

    # --- Solve / Step / Test -------------------------------------------------------------
    def solve(self, resume_file=None):
        """Train up to max_iter (Caffe's Solver::Solve), resuming from a state file if given.

        Logs "Optimization Done." at the end as Solver::Solve does (caffe.cpp's train() logs
        it once more after this returns).
        """
        LOG.info(f"Solving {self.net.name}")
        LOG.info(f"Learning Rate Policy: {self.param.lr_policy}")
        self.requested_early_exit = False
        if resume_file:
            LOG.info(f"Restoring previous solver status from {resume_file}")
            self.restore(resume_file)
        start_iter = self.iter
        self.step(self.param.max_iter - self.iter)
        param = self.param
        if param.snapshot_after_train and (not param.snapshot
                                           or self.iter % param.snapshot != 0):
            self.snapshot()
        if self.requested_early_exit:
            LOG.info("Optimization stopped early.")
            return
        if param.display and self.iter % param.display == 0:
            loss = _f32(self.net.forward())
            self._update_smoothed_loss(loss, start_iter, param.average_loss)
            LOG.info(f"Iteration {self.iter}, loss = {_g(self.smoothed_loss)}")
        if param.test_interval and self.iter % param.test_interval == 0:
            self.test_all()
        LOG.info("Optimization Done.")

    def step(self, iters):
        """Run ``iters`` iterations of Caffe's Solver::Step."""
        param = self.param
        start_iter, stop_iter = self.iter, self.iter + iters
        self._losses = []
        self.smoothed_loss = _f32(0)
        timer = time.perf_counter()
        iterations_last = self.iter
        while self.iter < stop_iter:
            self.net.clear_param_diffs()
            if (param.test_interval and self.iter % param.test_interval == 0
                    and (self.iter > 0 or param.test_initialization)):
                self.test_all()
                if self.requested_early_exit:
                    break
            for callback in self.callbacks:
                callback.on_start()
            display = bool(param.display) and self.iter % param.display == 0
            self.net.debug_info = display and param.debug_info
            loss = _f32(0)
            for _ in range(param.iter_size):
                loss += _f32(self.net.forward_backward())
            loss /= _f32(param.iter_size)
            self._divergence.check(loss, self.net, self.iter)
            self._update_smoothed_loss(loss, start_iter, param.average_loss)
            if display:
                lapse = _f32(time.perf_counter() - timer)
                per_s = _f32(self.iter - iterations_last) / (lapse if lapse else _f32(1))
                LOG.info(f"Iteration {self.iter} ({_g(per_s)} iter/s, {_g(lapse)}s/"
                         f"{param.display} iters), loss = {_g(self.smoothed_loss)}")
                timer = time.perf_counter()
                iterations_last = self.iter
                self._log_outputs(self.net, "Train", self._net_outputs(self.net))
            for callback in self.callbacks:
                callback.on_gradients_ready()
            self.apply_update()
            self.iter += 1
            request = self._requested_action()
            if (param.snapshot and self.iter % param.snapshot == 0) or request == "snapshot":
                self.snapshot()
            if request == "stop":
                self.requested_early_exit = True
                break

    def _update_smoothed_loss(self, loss, start_iter, average_loss):
        if len(self._losses) < average_loss:
            self._losses.append(loss)
            size = len(self._losses)
            self.smoothed_loss = (self.smoothed_loss * _f32(size - 1) + loss) / _f32(size)
        else:
            idx = (self.iter - start_iter) % average_loss
            self.smoothed_loss += (loss - self._losses[idx]) / _f32(average_loss)
            self._losses[idx] = loss

    def test_all(self):
        """Caffe's TestAll: test every test net until a stop is requested."""
        for test_net_id in range(len(self.test_nets)):
            if self.requested_early_exit:
                break
            self.test(test_net_id)

    def test(self, test_net_id):
        """Caffe's Test: average each output over test_iter forward passes and log it.

        Returns:
            the mean scores (float32 per output element), or None when interrupted.
        """
        LOG.info(f"Iteration {self.iter}, Testing net (#{test_net_id})")
        test_net = self.test_nets[test_net_id]
        net_weights.share_trained_layers_with(test_net, self.net)
        test_iter = self.param.test_iter[test_net_id]
        scores, loss = None, _f32(0)
        for _ in range(test_iter):
            self._drain_requests()
            if self.requested_early_exit:
                break
            iter_loss = _f32(test_net.forward())
            if self.param.test_compute_loss:
                loss += iter_loss
            outputs = self._net_outputs(test_net)
            scores = outputs.copy() if scores is None else scores + outputs
        if self.requested_early_exit:
            LOG.info("Test interrupted.")
            return None
        if scores is None:
            scores = np.zeros(0, np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):   # test_iter 0: nan, as Caffe
            loss /= _f32(test_iter)
            mean = scores / _f32(test_iter)
        if self.param.test_compute_loss:
            LOG.info(f"Test loss: {_g(loss)}")
        self.mean_scores[test_net_id] = mean
        self._log_outputs(test_net, "Test", mean)
        return mean

    def _drain_requests(self):
        request = self._requested_action()
        while request != "none":
            if request == "snapshot":
                self.snapshot()
            elif request == "stop":
                self.requested_early_exit = True
            request = self._requested_action()

    def _requested_action(self):
        if self.action_callback is None:
            return "none"
        request = self.action_callback()
        if request not in ACTIONS:
            raise ValueError(f"action_callback returned {request!r}; expected one of {ACTIONS}")
        return request

    @staticmethod
    def _net_outputs(net):
        blobs = net.output_blobs
        if not blobs:
            return np.zeros(0, np.float32)
        return np.concatenate([b.read_data().ravel() for b in blobs]).astype(np.float32)

    @staticmethod
    def _log_outputs(net, which, values):
        """The "    Train/Test net output #k: name = v (* w = l loss)" lines."""
        index = 0
        for blob_id, blob in zip(net.output_blob_indices, net.output_blobs):
            name = net.blob_names[blob_id]
            weight = _f32(net.blob_loss_weights[blob_id])
            for value in values[index:index + blob.count()]:
                suffix = f" (* {_g(weight)} = {_g(weight * value)} loss)" if weight else ""
                LOG.info(f"    {which} net output #{index}: {name} = {_g(value)}{suffix}")
                index += 1

    # --- the update (SGDSolver::ApplyUpdate) ---------------------------------------------
    def learning_rate(self):
        """Caffe's GetLearningRate: the rate for ``self.iter``; tracks ``current_step``."""
        step = lr_policy.step_index(self.param, self.iter)
        if self.param.lr_policy == "multistep" and step != self.current_step:
            LOG.info(f"MultiStep Status: Iteration {self.iter}, step = {step}")
        if self.param.lr_policy in ("step", "multistep"):
            self.current_step = step
        return _f32(lr_policy.learning_rate(self.param, self.iter))

    def apply_update(self):
        """lr, clip, then per param normalize, regularize, compute the step; net.update()."""
        rate = self.learning_rate()
        if self.param.display and self.iter % self.param.display == 0:
            LOG.info(f"Iteration {self.iter}, lr = {_g(rate)}")
        self.clip_gradients()
        for param_id in range(len(self.net.learnable_params)):
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
            LOG.info(f"Gradient clipping: scaling down gradients (L2 norm {_g(l2norm)} > "
                     f"{_g(clip)}) by scale factor {_g(scale)}")
            for blob in params:
                blob.scale_diff(scale)

    def normalize(self, param_id):
        """diff *= 1 / iter_size (undo the accumulation over iter_size passes)."""
        if self.param.iter_size == 1:
            return
        self.net.learnable_params[param_id].scale_diff(_f32(1) / _f32(self.param.iter_size))

    def regularize(self, param_id):
        """L2: diff += decay * data; L1: diff += decay * sign(data);
        decay = weight_decay * decay_mult."""
        decay = _f32(self.param.weight_decay) * _f32(self.net.params_weight_decay[param_id])
        if not decay:
            return
        blob = self.net.learnable_params[param_id]
        kind = self.param.regularization_type
        if kind not in ("L1", "L2"):
            raise CaffeError(f"Unknown regularization type: {kind} (known types: L1, L2)")
        if self.on_gpu:
            from pycaffe_cli.layers.kernels.cuda import math as gpu_math
            data = blob.gpu_data_for_reading()
            if kind == "L2":
                gpu_math.axpy(blob.count(), decay, data, blob.gpu_diff)
            else:
                cuda_updates().l1_regularize(decay, data, blob.gpu_diff)
        elif kind == "L2":
            blob.flat_diff[:] += decay * blob.read_data().ravel()
        else:
            blob.flat_diff[:] += decay * np.sign(blob.read_data().ravel())

    def local_rate(self, param_id, rate):
        return _f32(rate) * _f32(self.net.params_lr[param_id])

    def compute_update_value(self, param_id, rate):
        """Turn the param's diff into the step to subtract (the update rule)."""
        raise NotImplementedError

    @property
    def on_gpu(self):
        """Whether updates run on the device (Caffe: the mode, as in SGDSolver::Regularize)."""
        return backend.mode() is backend.Mode.GPU

    def update_function(self, cpu_function):
        """The update rule to run: ``cpu_function`` in CPU mode, else its device twin (same
        name and signature in cuda_updates.py)."""
        if self.on_gpu:
            return getattr(cuda_updates(), cpu_function.__name__)
        return cpu_function

    def diff_of(self, param_id):
        """The flat diff of learnable param ``param_id``, on the device in GPU mode."""
        blob = self.net.learnable_params[param_id]
        return blob.gpu_diff if self.on_gpu else blob.flat_diff

    def history_of(self, param_id, which=0):
        """The flat history array ``which`` (0 or 1) of learnable param ``param_id``, on the
        device in GPU mode."""
        blob = self.history[which * len(self.net.learnable_params) + param_id]
        return blob.gpu_data if self.on_gpu else blob.flat_data

    # --- snapshots -----------------------------------------------------------------------
    def snapshot_filename(self, extension):
        return state_io.snapshot_filename(self.param.snapshot_prefix, self.iter, extension)

    def snapshot(self):
        """Write the weights, the exact-resume sidecar and the solver state, in that order."""
        return state_io.write_snapshot(self.param, self.iter, self.net, self.test_nets,
                                       self.current_step, self.history)

    def restore(self, path):
        """Load a .solverstate(.h5): iter, weights (learned_net), current_step, history."""
        saved = state_io.read_solver_state(path)
        self.iter = saved.iter
        if saved.learned_net:
            net_weights.copy_trained_layers_from(
                self.net, state_io.locate_learned_net(saved.learned_net, path))
        self.current_step = saved.current_step
        if len(saved.history) != len(self.history):
            raise CaffeError(f"{path}: Incorrect length of history blobs: the file has "
                             f"{len(saved.history)}, a {self.type} solver for this net keeps "
                             f"{len(self.history)}")
        if not saved.is_hdf5:
            LOG.info("SGDSolver: restoring history")
        for i, (blob, array) in enumerate(zip(self.history, saved.history)):
            if array.size != blob.count():
                raise CaffeError(f"{path}: history blob {i} has {array.size} values, the "
                                 f"param it belongs to has {blob.count()}")
            blob.reshape(array.shape)
            blob.data[...] = array
        state_io.read_resume_sidecar(path, self.net, self.test_nets)
