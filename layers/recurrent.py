"""The shared machinery of the recurrent layers RNN and LSTM (Caffe's RecurrentLayer).

Not a layer type itself. A recurrent layer unrolls its recurrence over the T timesteps of its
input into an internal NetParameter (InnerProduct, Eltwise, Scale, Slice, Concat, ... one set
per timestep, the weights shared by ParamSpec name), builds a ``Net`` from it and runs that
net's forward and backward as its own.

Bottoms: x (T, N, ...), cont (T, N) (cont_t = 0 starts a new sequence in stream n), an
optional static input x_static (N, ...), and with ``expose_hidden`` the initial recurrent
states (one bottom per recurrent blob, after x_static). Tops: the output sequence, and with
``expose_hidden`` the final recurrent states.

The unrolled net, as Caffe builds it: an Input layer with tops x, cont (and x_static), the
subclass's layers (see ``fill_unrolled_net``), every layer name prefixed with this layer's
name and "_", and one "<output>_pseudoloss" Reduction with loss weight 1 per output so the
net back-propagates to what the outputs depend on (these are never run). The layer's
learnable blobs are the unrolled net's parameters that are not shared from an earlier layer,
in the net's order, so the blobs line up with a Caffe-trained model's.

Without ``expose_hidden`` the final state of one forward pass is the initial state of the
next (zero at first), as in Caffe; cont_1 = 0 discards it. No gradient flows into cont,
across batches, or into exposed initial states (Caffe shares only their data).

GPU mode: the layer's own work (sharing blobs with the unrolled net, carrying the final state
over to the next forward) stays on the device; the unrolled net's layers run their own GPU
paths, or their CPU fallbacks where they have none.
"""
import contextlib
import logging

from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError
from pycaffe_cli.layers.base import Layer
from pycaffe_cli.log import LOG
from pycaffe_cli.net.net import Net
from pycaffe_cli.proto import caffe_pb2

SUM = caffe_pb2.EltwiseParameter.SUM


# --- unrolled-net building blocks -------------------------------------------------------------
def add_layer(net_param, type_name, name, bottom=(), top=(), param_names=()):
    """Append a layer to ``net_param`` and return it (for its type-specific fields)."""
    layer = net_param.layer.add(type=type_name, name=name)
    layer.bottom.extend(bottom)
    layer.top.extend(top)
    for param_name in param_names:
        layer.param.add(name=param_name)
    return layer


def add_inner_product(net_param, name, bottom, top, param_names, num_output, axis, weight_filler,
                      bias_filler=None):
    """An InnerProduct layer with the weight (and bias, when a bias filler is given)."""
    layer = add_layer(net_param, "InnerProduct", name, [bottom], [top], param_names)
    ip = layer.inner_product_param
    ip.num_output = num_output
    ip.bias_term = bias_filler is not None
    ip.axis = axis
    ip.weight_filler.CopyFrom(weight_filler)
    if bias_filler is not None:
        ip.bias_filler.CopyFrom(bias_filler)
    return layer


def add_sum(net_param, name, bottom, top):
    layer = add_layer(net_param, "Eltwise", name, bottom, [top])
    layer.eltwise_param.operation = SUM
    return layer


def add_slice(net_param, name, bottom):
    """A Slice along axis 0 (one timestep per top); the caller appends the tops."""
    layer = add_layer(net_param, "Slice", name, [bottom])
    layer.slice_param.axis = 0
    return layer


def add_cont_scale(net_param, previous, cont, top):
    """h_conted_{t-1} = cont_t * h_{t-1}: a Scale along axis 0 by the (1, N) indicators."""
    layer = add_layer(net_param, "Scale", top, [previous, cont], [top])
    layer.scale_param.axis = 0
    return layer


def add_static_transform(net_param, name, param_name, num_output, weight_filler):
    """W x_static (N, ...) -> reshaped to one timestep (1, N, num_output) named ``name``."""
    add_inner_product(net_param, name, "x_static", name + "_preshape", [param_name], num_output,
                      1, weight_filler)
    net_param.layer[-1].propagate_down.append(True)
    reshape = add_layer(net_param, "Reshape", name + "_reshape", [name + "_preshape"], [name])
    reshape.reshape_param.shape.dim.extend([1, -1, num_output])


def add_input_transforms(net_param, weight, bias, num_output, weight_filler, bias_filler,
                         static_input):
    """What LSTM and RNN unroll first: the per-timestep Slice of cont, ``weight``_x = W x + b
    for all timesteps at once (``weight`` is W_xc or W_xh), ``weight``_x_static when there is
    a static input, and the per-timestep Slice of ``weight``_x. Returns the two Slices (cont,
    x) for the caller to give one top per timestep."""
    cont_slice = add_slice(net_param, "cont_slice", "cont")
    add_inner_product(net_param, "x_transform", "x", f"{weight}_x", [weight, bias], num_output,
                      2, weight_filler, bias_filler).propagate_down.append(True)
    if static_input:
        add_static_transform(net_param, f"{weight}_x_static", f"{weight}_static", num_output,
                             weight_filler)
    return cont_slice, add_slice(net_param, f"{weight}_x_slice", f"{weight}_x")


def _copy_of(blob):
    """A new blob holding a copy of ``blob``'s data (copied on the device in GPU mode)."""
    saved = Blob(blob.shape)
    saved.copy_from(blob)
    return saved


@contextlib.contextmanager
def _quiet(enabled):
    """Raise the pycaffe logger to WARNING while the unrolled net is built (it logs a lot)."""
    if not enabled:
        yield
        return
    level = LOG.level
    LOG.setLevel(logging.WARNING)
    try:
        yield
    finally:
        LOG.setLevel(level)


class RecurrentLayer(Layer):
    """Base of RNN and LSTM. Subclasses define the class attributes and the methods below.

    Attributes (class):
        num_recurrent: how many recurrent state blobs (RNN 1: h; LSTM 2: h, c).
        static_transform: the unrolled layer that transforms x_static (to find it).
    """

    num_recurrent = 1
    static_transform = None

    def __init__(self, param):
        super().__init__(param)
        exposed = self.num_recurrent if param.recurrent_param.expose_hidden else 0
        self.min_num_bottom = 2 + exposed
        self.max_num_bottom = 3 + exposed
        self.exact_num_top = 1 + exposed
        self._given_blobs, self.blobs = self.blobs, []
        self.net = None

    # --- what subclasses define --------------------------------------------------------------
    def recurrent_input_names(self):
        raise NotImplementedError

    def recurrent_output_names(self):
        raise NotImplementedError

    def output_names(self):
        raise NotImplementedError

    def fill_unrolled_net(self, net_param):
        raise NotImplementedError

    def recurrent_input_shapes(self):
        """Every recurrent state is one timestep of N streams: (1, N, num_output)."""
        return [(1, self.N, self.num_output)] * self.num_recurrent

    # --- set up ------------------------------------------------------------------------------
    def layer_setup(self, bottom, top):
        p = self.param.recurrent_param
        if p.num_output <= 0:
            raise self.error(f"recurrent_param.num_output must be positive, got {p.num_output}")
        self.num_output = p.num_output
        self.expose_hidden = p.expose_hidden
        self.T, self.N = self._check_bottoms(bottom)
        LOG.info(f"Initializing recurrent layer: assuming input batch contains {self.T} "
                 f"timesteps of {self.N} independent streams.")
        exposed = self.num_recurrent if self.expose_hidden else 0
        self.static_input = len(bottom) > 2 + exposed
        if self.static_input and (bottom[2].num_axes < 1 or bottom[2].shape[0] != self.N):
            raise self.error(f"the static input bottom[2] must have shape (N, ...) with N = "
                             f"{self.N} streams, got {bottom[2].shape_string()}")
        self._build_net(bottom)
        self.blobs = list(self.net.learnable_params)
        for i, param in enumerate(self.net.param_entries):
            if param.owner == -1:
                LOG.info(f"Adding parameter {i}: {param.display_name}")
        self._load_given_blobs()
        self.param_propagate_down = [True] * len(self.blobs)

    def _check_bottoms(self, bottom):
        """(T, N) of the input, after checking x and cont."""
        if bottom[0].num_axes < 2:
            raise self.error("bottom[0] must have at least 2 axes -- (#timesteps, #streams, "
                             f"...), got {bottom[0].shape_string()}")
        timesteps, streams = bottom[0].shape[:2]
        if bottom[1].shape != (timesteps, streams):
            raise self.error(f"bottom[1] (cont) must have exactly 2 axes -- (#timesteps, "
                             f"#streams) = ({timesteps}, {streams}), got "
                             f"{bottom[1].shape_string()}")
        return timesteps, streams

    def _build_net(self, bottom):
        """Build the unrolled net for the current T and N and find its named blobs."""
        net_param = caffe_pb2.NetParameter()
        inputs = add_layer(net_param, "Input", "", top=["x", "cont"])
        inputs.input_param.shape.add().dim.extend(bottom[0].shape)
        inputs.input_param.shape.add().dim.extend(bottom[1].shape)
        if self.static_input:
            inputs.top.append("x_static")
            inputs.input_param.shape.add().dim.extend(bottom[2].shape)
        self.fill_unrolled_net(net_param)
        if self.name:
            for layer in net_param.layer:
                layer.name = f"{self.name}_{layer.name}"
        for output in self.output_names():
            loss = add_layer(net_param, "Reduction", output + "_pseudoloss", [output],
                             [output + "_pseudoloss"])
            loss.loss_weight.append(1)
        debug = self.param.recurrent_param.debug_info
        with _quiet(not debug), self._inner_errors():
            self.net = Net(net_param, phase=self.phase)
        self.net.debug_info = debug
        self._find_blobs()
        for blob in self.recurrent_outputs:
            blob.diff[...] = 0  # no back-propagation across batches
        self._shape_key = self._shapes(bottom)

    def _find_blobs(self):
        net = self.net
        self.x_input = net.blob_by_name("x")
        self.cont_input = net.blob_by_name("cont")
        self.static_blob = net.blob_by_name("x_static") if self.static_input else None
        self.recurrent_inputs = [net.blob_by_name(n) for n in self.recurrent_input_names()]
        self.recurrent_outputs = [net.blob_by_name(n) for n in self.recurrent_output_names()]
        self.outputs = [net.blob_by_name(n) for n in self.output_names()]
        self.last_layer = len(net.layers) - 1 - len(self.outputs)
        prefix = f"{self.name}_" if self.name else ""
        self.x_transform_id = net.layer_names.index(prefix + "x_transform")
        self.static_transform_id = (net.layer_names.index(prefix + self.static_transform)
                                    if self.static_input else None)

    @contextlib.contextmanager
    def _inner_errors(self):
        """Report a problem in the unrolled net as this layer's."""
        try:
            yield
        except CaffeError as error:
            raise self.error(f"in the unrolled net: {error}") from None

    def _load_given_blobs(self):
        """Blobs that came with the layer's parameter replace the filled values."""
        given = self._given_blobs
        if not given:
            return
        if len(given) != len(self.blobs) or any(
                g.count() != b.count() for g, b in zip(given, self.blobs)):
            raise self.error(f"the layer's given blobs have shapes "
                             f"{[g.shape for g in given]}, the unrolled net needs "
                             f"{[b.shape for b in self.blobs]}")
        for mine, source in zip(self.blobs, given):
            mine.flat_data[...] = source.flat_data
        self._given_blobs = []

    # --- reshape -----------------------------------------------------------------------------
    @staticmethod
    def _shapes(bottom):
        return tuple(blob.shape for blob in bottom)

    def reshape(self, bottom, top):
        timesteps, self.N = self._check_bottoms(bottom)
        if timesteps != self.T:
            self._rebuild(bottom, timesteps)  # Caffe cannot change T; we unroll again
        key = self._shapes(bottom)
        if key != self._shape_key:
            self.x_input.reshape_like(bottom[0])
            self.cont_input.reshape_like(bottom[1])
            if self.static_input:
                self.static_blob.reshape_like(bottom[2])
            for blob, shape in zip(self.recurrent_inputs, self.recurrent_input_shapes()):
                blob.reshape(shape)
            with self._inner_errors():
                self.net.reshape()
            self._shape_key = key
        self._share_with_outer(bottom, top)

    def _share_with_outer(self, bottom, top):
        self.x_input.share_data(bottom[0])
        self.x_input.share_diff(bottom[0])
        self.cont_input.share_data(bottom[1])
        if self.static_input:
            self.static_blob.share_data(bottom[2])
            self.static_blob.share_diff(bottom[2])
        if self.expose_hidden:
            first = 2 + self.static_input
            for j, blob in enumerate(self.recurrent_inputs):
                given = bottom[first + j]
                if given.shape != blob.shape:
                    raise self.error(f"bottom[{first + j}] shape must match hidden state "
                                     f"input shape: {blob.shape_string()}, got "
                                     f"{given.shape_string()}")
                blob.share_data(given)
        for blob, output in zip(top, self.outputs):
            blob.reshape_like(output)
            blob.share_data(output)
            blob.share_diff(output)
        for blob, state in zip(top[len(self.outputs):], self.recurrent_outputs):
            blob.reshape_like(state)
            blob.share_data(state)

    def _rebuild(self, bottom, timesteps):
        """Unroll for a new number of timesteps, keeping the parameters and the state."""
        state = [_copy_of(blob) for blob in self.recurrent_outputs]
        LOG.info(f"Recurrent layer {self.name}: unrolling again for {timesteps} timesteps.")
        previous, self.T = self.T, timesteps
        try:
            self._build_net(bottom)
        except CaffeError:
            self.T = previous
            raise
        self._link_params()
        for blob, saved in zip(self.recurrent_outputs, state):
            if blob.shape == saved.shape:
                blob.copy_from(saved)  # on the device in GPU mode

    def _link_params(self):
        """Make every parameter of the unrolled net use the storage of this layer's blobs.

        Sharing by the outer net, loading weights or ShareTrainedLayersWith may have given
        ``self.blobs`` new storage (Caffe re-shares its test nets' weights for the same
        reason).
        """
        for param in self.net.param_entries:
            owner = self.blobs[param.learnable_id]
            if param.blob is not owner:
                param.blob.share_data(owner)
                param.blob.share_diff(owner)

    # --- forward / backward ------------------------------------------------------------------
    def forward_cpu(self, bottom, top):
        self._forward(top, self._carry_state_cpu)

    def forward_gpu(self, bottom, top):
        """As forward_cpu; the state is carried over on the device, and the unrolled net's
        layers run their own GPU paths (or their logged CPU fallbacks)."""
        self._forward(top, self._carry_state_gpu)

    def _forward(self, top, carry_state):
        self._link_params()
        if not self.expose_hidden:
            carry_state()
        self.net.forward(end=self.last_layer)
        for blob, state in zip(top[len(self.outputs):], self.recurrent_outputs):
            blob.share_data(state)

    def _carry_state_cpu(self):
        """The last forward's final state becomes this one's initial state."""
        for start, end in zip(self.recurrent_inputs, self.recurrent_outputs):
            start.data[...] = end.data

    def _carry_state_gpu(self):
        from pycaffe_cli.cuda import memory
        for start, end in zip(self.recurrent_inputs, self.recurrent_outputs):
            memory.copy(end.gpu_data, start.mutable_gpu_data)

    def backward_cpu(self, top, propagate_down, bottom):
        # Gradients for x and x_static only where asked; none for cont or exposed states.
        layers = self.net.layer_entries
        layers[self.x_transform_id].bottom_need_backward[0] = bool(propagate_down[0])
        if self.static_input:
            layers[self.static_transform_id].bottom_need_backward[0] = bool(propagate_down[2])
        self.net.backward(start=self.last_layer)

    def backward_gpu(self, top, propagate_down, bottom):
        """The unrolled net's backward; it touches no blob data itself, so it is the CPU
        path's, with each inner layer running its own GPU path (or CPU fallback)."""
        self.backward_cpu(top, propagate_down, bottom)

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1
