"""The training loop (Caffe's Solver::Solve / Step / TestAll / Test) and its log lines.

``LoopMixin`` is one of the three parts of ``base.Solver``. It reads what the Solver declares
(``param``, ``net``, ``test_nets``, ``callbacks``, ``action_callback``) and keeps the loop's
state (``iter``, ``smoothed_loss``, ``requested_early_exit``, ``mean_scores``); each iteration
ends in ``apply_update`` (update.py) and, when due, ``snapshot`` (snapshots.py).

Numbers follow Caffe's types: losses are float32; log lines format them like C++ ostreams
(``f"{x:g}"``).
"""
import time

import numpy as np

from pycaffe_cli.detection.average_precision import DetectionResults, check_result_blob
from pycaffe_cli.net import weights as net_weights
from pycaffe_cli.log import LOG

_f32 = np.float32
ACTIONS = ("none", "snapshot", "stop")


def _g(value):
    """C++ ostream formatting of a number (6 significant digits, %g)."""
    return f"{float(value):g}"


class LoopMixin:
    """Solve, step and test a Solver's nets with Caffe's log lines."""

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
                if self.coordinator is not None:   # rank 0 tested; did it stop?
                    self.coordinator.after_test(self)
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
            if self.coordinator is not None:   # every rank does what rank 0 was asked
                request = self.coordinator.agree(request)
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
        """Caffe's TestAll: test every test net until a stop is requested (by mean average
        precision with SSD's eval_type "detection")."""
        for test_net_id in range(len(self.test_nets)):
            if self.requested_early_exit:
                break
            if self.param.eval_type == "detection":
                self.test_detection(test_net_id)
            else:
                self.test(test_net_id)

    def test_detection(self, test_net_id):
        """SSD's TestDetection: gather the DetectionEvaluate rows of test_iter forward passes
        and log each output's mean average precision (ap_version; with
        show_per_class_result each class's AP too), as "Test net output #k: name = mAP".

        Every output must be DetectionEvaluate rows. Unlike the fork, an output without any
        detection is logged too (mAP 0; the fork logs nothing or stops on it).

        Returns:
            the mAP of each output (float32), or None when interrupted.
        """
        test_net = self.test_nets[test_net_id]
        names = [test_net.blob_entries[i].name for i in test_net.output_blob_indices]
        results = DetectionResults(len(names))

        def gather(net):
            for j, blob in enumerate(net.output_blobs):
                check_result_blob(blob.shape, names[j], f'eval_type "detection": test net '
                                                        f"#{test_net_id}")
                results.add(j, blob.cpu_data)
        if self._test_passes(test_net_id, gather) is None:
            return None
        maps = np.array([results.log(j, f"    Test net output #{j}: {name}",
                                     self.param.ap_version, self.param.show_per_class_result)
                         for j, name in enumerate(names)], np.float32)
        self.mean_scores[test_net_id] = maps
        return maps

    def test(self, test_net_id):
        """Caffe's Test: average each output over test_iter forward passes and log it.

        Returns:
            the mean scores (float32 per output element), or None when interrupted.
        """
        test_net = self.test_nets[test_net_id]
        sums = []

        def accumulate(net):
            outputs = self._net_outputs(net)
            sums[:] = [outputs.copy() if not sums else sums[0] + outputs]
        if self._test_passes(test_net_id, accumulate) is None:
            return None
        scores = sums[0] if sums else np.zeros(0, np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):   # test_iter 0: nan, as Caffe
            mean = scores / _f32(self.param.test_iter[test_net_id])
        self.mean_scores[test_net_id] = mean
        self._log_outputs(test_net, "Test", mean)
        return mean

    def _test_passes(self, test_net_id, after_each):
        """The test loop both kinds of test share: the train net's weights into the test net,
        then test_iter forward passes, ``after_each(test_net)`` after each, stopping early on
        a stop request; logs the mean test loss with test_compute_loss.

        Returns:
            the mean loss (float32), or None when interrupted.
        """
        LOG.info(f"Iteration {self.iter}, Testing net (#{test_net_id})")
        test_net = self.test_nets[test_net_id]
        net_weights.share_trained_layers_with(test_net, self.net)
        test_iter = self.param.test_iter[test_net_id]
        loss = _f32(0)
        for _ in range(test_iter):
            self._drain_requests()
            if self.requested_early_exit:
                break
            iter_loss = _f32(test_net.forward())
            if self.param.test_compute_loss:
                loss += iter_loss
            after_each(test_net)
        if self.requested_early_exit:
            LOG.info("Test interrupted.")
            return None
        with np.errstate(divide="ignore", invalid="ignore"):   # test_iter 0: nan, as Caffe
            loss /= _f32(test_iter)
        if self.param.test_compute_loss:
            LOG.info(f"Test loss: {_g(loss)}")
        return loss

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
        return np.concatenate([b.cpu_data.ravel() for b in blobs]).astype(np.float32)

    @staticmethod
    def _log_outputs(net, which, values):
        """The "    Train/Test net output #k: name = v (* w = l loss)" lines."""
        index = 0
        for blob_id in net.output_blob_indices:
            entry = net.blob_entries[blob_id]
            name, blob, weight = entry.name, entry.blob, _f32(entry.loss_weight)
            for value in values[index:index + blob.count()]:
                suffix = f" (* {_g(weight)} = {_g(weight * value)} loss)" if weight else ""
                LOG.info(f"    {which} net output #{index}: {name} = {_g(value)}{suffix}")
                index += 1
