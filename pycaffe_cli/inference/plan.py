"""InferencePlan: run a TEST-phase net forward with less work and the same numbers.

Built from a Net that will only be run forward (the caller promises no backward: ``pycaffe
test``, ``pycaffe time`` on a deploy net, ``caffe.Net.plan_inference``), the plan

* runs each convolution or inner product followed by BatchNorm / Scale / Bias layers as one
  layer with folded weights, and in CPU mode applies a ReLU after it where the layer adds
  its bias, and applies a ReLU after an Eltwise layer as that layer writes its top
  (pycaffe_cli/inference/fold.py); the net's own layers and params are not changed (beyond
  sharing scratch buffers, below);
* on the CPU runs 3x3 convolutions with stride 1 as Winograd F(4x4, 3x3) where that pays
  and its proven error bound is at most 16 times the GEMM's for the layer's weights
  (layers/convolution/convolution.py, kernels/cpu/winograd.py, kernels/cpu/winograd_error.py);
* moves blobs whose lives do not overlap into shared buffers (pycaffe_cli/inference/memory.py),
  makes a Concat's bottoms parts of its top where the top holds them one after the other
  (a batch of one, CPU), and lets layers with scratch buffers (convolutions' column
  buffers) share one set; on the CPU, where memory allows buffers of their own too, its
  first passes time both layouts and it keeps the faster (``LayoutTrial``);
* runs its steps as a plain list of each layer's forward-only pass (its inference hooks'
  ``forward_pass()``, layers/inference_hooks.py: its bound ``forward_cpu`` / ``forward_gpu``,
  or a cheaper one that keeps nothing for backward: max pooling without its argmax mask):
  a layer's reshape runs again only when shapes may have changed (the net's input shapes
  changed, or a layer whose output shape depends on the data -- a data layer, Filter, a
  Python layer, any loss -- produced a new shape; those run their full ``Layer.forward``
  every time).

The net's outputs, its inputs and the blobs named in ``keep`` keep the values the plain
``Net.forward`` gives them (folded weights and Winograd change the last bits, within the
bounds accuracy.py states); other blobs' values after a forward are undefined. Folded weights
are recomputed before a forward when a blob they come from was written through an accessor,
or uses other memory
(``share_data``), since (``Chain.stale``: the same stamps tell Winograd layers to transform
their weights again); after writing weights through an array kept from before, call
``refold()``. A mode change (CPU/GPU) rebuilds the plan. ``Net.backward`` refuses to run
once a plan has moved the net's blobs (``release()`` gives them memory of their own again).
"""
import statistics
from dataclasses import dataclass, field
from time import perf_counter

from pycaffe_cli import backend
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.inference.fold import find_chains, fold, make_layer
from pycaffe_cli.inference.memory import MemoryPlan
from pycaffe_cli.log import LOG
from pycaffe_cli.proto import caffe_pb2
from pycaffe_cli.sizes import MIB, blamed
from pycaffe_cli.synced_memory import data_stamps


# Timed passes in each blob layout before the plan keeps one (LayoutTrial); 0: no trial,
# blobs keep buffers of their own wherever memory allows them.
TRIAL_PASSES = 3


class LayoutTrial:
    """Which blob layout (memory.py: shared buffers, or each class its own) runs this net
    faster on this machine: a pass in each first (their buffers' first touch, untimed), then
    ``passes`` timed passes in each, taking turns so that a change in the machine's load
    falls on both; the lower median wins."""

    def __init__(self, passes):
        self.schedule = [False, True] + [False, True] * passes  # reused?, pass by pass
        self.done = 0
        self.times = {False: [], True: []}

    def record(self, reused, seconds):
        """A pass just ran in layout ``reused`` and took ``seconds``."""
        if self.done >= 2:
            self.times[reused].append(seconds)
        self.done += 1

    def next_layout(self):
        """The layout the next pass runs in, or None once the trial is over."""
        return self.schedule[self.done] if self.done < len(self.schedule) else None

    def medians(self):
        """(median seconds a pass with buffers of their own, with shared buffers)."""
        return statistics.median(self.times[False]), statistics.median(self.times[True])


@dataclass(slots=True, eq=False)
class Step:
    """One layer the plan runs: the net's, or a chain's (covering net layers at..end), and
    its ``inference()`` hooks (layers/inference_hooks.py: all the plan asks of a layer beyond
    reshape and forward)."""
    layer: object
    hooks: object
    bottoms: list
    tops: list
    bottom_ids: list
    top_ids: list
    at: int
    end: int
    full: bool  # runs Layer.forward (reshape, compute, loss) every time
    top_shapes: list = field(default_factory=list)


class InferencePlan:
    """A forward-only way to run ``net``; see the module docstring.

    Args:
        net: a TEST-phase engine Net.
        keep: names of blobs whose values must be the plain net's after ``forward``, beside
            the net's inputs and outputs.
    """

    def __init__(self, net, keep=()):
        if net.phase != caffe_pb2.TEST:
            raise CaffeError(f'net "{net.name}": an inference plan runs TEST-phase nets only '
                             "(a TRAIN net's forward also trains: BatchNorm statistics, "
                             "dropout)")
        self.net = net
        self.keep = [self._blob_id(name) for name in keep]
        self.memory = None
        self._trial = None
        self._build()
        net.add_callback("before_backward", self._refuse_backward)

    def _blob_id(self, name):
        if not self.net.has_blob(name):
            raise CaffeError(f'net "{self.net.name}" has no blob named "{name}" to keep')
        return self.net.blob_names.index(name)

    # --- building ------------------------------------------------------------------------
    def _build(self):
        net = self.net
        self.mode = backend.mode()
        if self.memory is not None:  # a rebuild: blobs get their own memory, shared anew
            self.memory.release()
            net.reshape()
        protected = set(self.keep) | set(net.output_blob_indices) | set(net.input_blob_indices)
        protected |= {i for i, entry in enumerate(net.blob_entries) if entry.loss_weight}
        self.chains = find_chains(net, protected, fuse_relu=self.mode is backend.Mode.CPU)
        for chain in self.chains:
            make_layer(net, chain)
        self._fold_sources = [blob for chain in self.chains for blob in chain.sources]
        self._fold_stamps = None
        self.steps = self._make_steps()
        for step in self.steps:  # a new plan transforms weights anew (see refold)
            step.hooks.forget_weight_transforms()
        self._share_workspaces()
        skipped = [blob_id for chain in self.chains for blob_id in chain.skipped]
        self.memory = MemoryPlan(net, self.steps, protected, skipped)
        self._reshape_and_assign()
        self._run = [(s.layer.forward if s.full else s.hooks.forward_pass(),
                      s.layer.reshape, s.bottoms, s.tops, s.top_shapes if s.full else None)
                     for s in self.steps]

    def _make_steps(self):
        net = self.net
        by_producer = {chain.producer: chain for chain in self.chains}
        covered = {i for chain in self.chains
                   for i in chain.affine + ([chain.relu] if chain.relu is not None else [])}
        covered -= set(by_producer)  # a standalone chain's first link is its producer
        steps = []
        for index, entry in enumerate(net.layer_entries):
            chain = by_producer.get(index)
            if index in covered:
                continue
            if chain is None:
                steps.append(_step(entry.layer, entry.bottoms, entry.tops, entry.bottom_ids,
                                   entry.top_ids, index, index, net))
            else:
                links = chain.affine + ([chain.relu] if chain.relu is not None else [])
                steps.append(_step(chain.layer, entry.bottoms,
                                   [net.blob_entries[chain.top_id].blob], entry.bottom_ids,
                                   [chain.top_id], index, max(links), net))
        return steps

    def _share_workspaces(self):
        """One set of scratch buffers per workspace family: the steps run one at a time."""
        first = {}
        for step in self.steps:
            family = step.hooks.workspace_family
            if family is not None:
                donor = first.setdefault(family, step.layer)
                if donor is not step.layer:
                    step.hooks.share_workspace(donor)

    def _reshape_and_assign(self):
        """Shape every step for the current inputs, then (re)assign the shared buffers; where
        both layouts are allowed, the next passes try them (``LayoutTrial``)."""
        self._reshape_all()
        self.memory.assign()
        self._trial = None
        if self.memory.both:
            if TRIAL_PASSES:
                self._trial = LayoutTrial(TRIAL_PASSES)
            else:
                self.memory.settle(False)
        self._reshape_all()  # layers that share their tops' memory (Split...) share it anew
        self._input_shapes = self._current_input_shapes()

    def _after_trial_pass(self, seconds):
        """Record a pass of the layout trial; move the blobs into the next pass's layout, or
        keep the faster one once the trial is over. No reshape: a layout moves every blob
        of a class, the ones that alias it included, and a reshape now would undo the shapes
        of tops that depend on the data (DetectionOutput's)."""
        trial = self._trial
        trial.record(self.memory.reused, seconds)
        layout = trial.next_layout()
        if layout is None:
            own, shared = trial.medians()
            self.memory.settle(shared < own)
            self._trial = None
            kept = "share buffers" if shared < own else "keep buffers of their own"
            LOG.info(f"Inference plan: blobs {kept} (passes took {own * 1e3:.2f} ms with "
                     f"buffers of their own, {shared * 1e3:.2f} ms with shared ones: "
                     f"medians of {len(trial.times[False])} each)")
        elif layout != self.memory.reused:
            self.memory.use(layout)

    def _reshape_all(self):
        for step in self.steps:
            if step.bottoms:
                step.layer.reshape(step.bottoms, step.tops)
            step.top_shapes[:] = [top.shape for top in step.tops]

    def _current_input_shapes(self):
        return [self.net.blob_entries[i].blob.shape for i in self.net.input_blob_indices]

    # --- running -------------------------------------------------------------------------
    def prepare(self):
        """Bring the plan up to date before a forward: rebuild after a mode change, re-fold
        weights whose sources were written, reshape and re-plan memory for new input
        shapes."""
        if backend.mode() is not self.mode:
            self._build()
        # One look at all the folds' sources, then at each chain only if one moved: these
        # objects are out of the caches after a pass (ResNet-50, batch 1: 0.31 ms a pass
        # chain by chain, 0.21 ms in one look).
        if data_stamps(self._fold_sources) != self._fold_stamps:
            for chain in self.chains:
                if chain.stale():
                    fold(self.net, chain)
            self._fold_stamps = data_stamps(self._fold_sources)
        if self._current_input_shapes() != self._input_shapes:
            self._reshape_and_assign()

    def forward(self, after_step=None):
        """Run the net forward; return the summed weighted loss, as ``Net.forward`` does.
        ``after_step(k)``, if given, is called after step k (timings)."""
        self.prepare()
        started = perf_counter()
        loss, reshape, index = 0.0, False, -1
        try:
            for index, (function, reshape_layer, bottoms, tops, shapes) in enumerate(self._run):
                if shapes is None:
                    if reshape:
                        reshape_layer(bottoms, tops)
                    function(bottoms, tops)
                else:
                    loss += function(bottoms, tops)
                    if [top.shape for top in tops] != shapes:
                        shapes[:] = [top.shape for top in tops]
                        reshape = True
                if after_step is not None:
                    after_step(index)
        except (CaffeError, MemoryError, ValueError) as error:
            wrapped = blamed(error, self.steps[index].layer, "forward")
            if wrapped is None:
                raise
            raise wrapped from None
        if self._trial is not None:
            self._after_trial_pass(perf_counter() - started)
        return loss

    def settle_layout(self):
        """Run passes until the blob layout trial is over (none once it is), so that what
        follows runs in the layout kept: ``pycaffe time`` before its clock starts."""
        while self._trial is not None:
            self.forward()

    def refold(self):
        """Recompute every folded (and transformed) weight from the net's blobs now."""
        for chain in self.chains:
            fold(self.net, chain)
        for step in self.steps:
            step.hooks.forget_weight_transforms()

    def release(self):
        """Stop using the plan: the moved blobs get memory of their own (their values are
        lost) and ``Net.backward`` runs again after a plain forward."""
        self.memory.release()
        callbacks = self.net.callbacks["before_backward"]
        if self._refuse_backward in callbacks:
            callbacks.remove(self._refuse_backward)

    def _refuse_backward(self, layer_index):
        raise CaffeError(f'net "{self.net.name}" runs an inference plan, which shares the '
                         "memory of blobs backward reads; release the plan (and run forward "
                         "again) before backward")

    # --- what it did -----------------------------------------------------------------------
    def step_layers(self, step_index):
        """The net's layer indices a step stands for (a chain's: producer and links)."""
        step = self.steps[step_index]
        chain = next((c for c in self.chains if c.producer == step.at), None)
        if chain is None:
            return [step.at]
        links = [i for i in chain.affine if i != step.at]  # a standalone chain's first
        return [step.at] + links + ([chain.relu] if chain.relu is not None else [])

    def summary(self):
        """One line: what was folded, fused, run as Winograd and shared, and the blob memory
        before/after."""
        folded, producers = set(), {}
        for chain in self.chains:
            if chain.affine:
                folded.update(self.net.layer_entries[i].layer.type for i in chain.affine)
                producers[chain.layer.type] = producers.get(chain.layer.type, 0) + 1
        relus = sum(chain.relu is not None for chain in self.chains)
        parts = []
        if folded:
            count = sum(len(chain.affine) for chain in self.chains)
            parts.append(f"folded {count} {'/'.join(sorted(folded))} layers into "
                         f"{sum(producers.values())} {'/'.join(sorted(producers))} layers")
        if relus:
            parts.append(f"fused {relus} ReLU layers")
        special = {}  # (layer type, special path's description): how many steps took it
        for step in self.steps:
            path = step.hooks.special_path()
            if path is not None:
                key = (step.layer.type, path.description)
                special[key] = special.get(key, 0) + 1
        for (kind, description), count in special.items():
            parts.append(f"ran {count} {kind} layers as {description}")
        memory = self.memory
        if memory.joined:
            parts.append(f"{len(memory.joined)} Concat layers copy nothing (their bottoms are "
                         "parts of their tops)")
        sizes = (f"blob memory {memory.before_bytes / MIB:.1f} MB -> "
                 f"{memory.after_bytes / MIB:.1f} MB")
        if memory.both:
            parts.append(f"{memory.moved} blobs in {memory.buffer_count} buffers of their own "
                         "until passes timed each way show whether shared ones run faster "
                         f"({sizes})")
        elif memory.reused:
            parts.append(f"{memory.moved} blobs share {memory.buffer_count} buffers ({sizes})")
        else:
            parts.append(f"{memory.moved} blobs in {memory.buffer_count} buffers, none reused "
                         f"(reused above {memory.own_limit / MIB:.0f} MB or where passes "
                         f"timed each way ran faster shared; {sizes})")
        return "Inference plan: " + ", ".join(parts)


def _step(layer, bottoms, tops, bottom_ids, top_ids, at, end, net):
    hooks = layer.inference()
    full = (not bottoms or hooks.reshape_reads_values
            or any(net.blob_entries[i].loss_weight for i in top_ids))
    return Step(layer, hooks, list(bottoms), list(tops), list(bottom_ids), list(top_ids), at,
                end, full)
