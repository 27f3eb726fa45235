"""Net: a DAG of layers over named blobs, built from a NetParameter.

Construction is a short pipeline (Caffe's Net::Init, split into named steps):
``filter_net`` (NetState rules) -> ``insert_splits`` -> ``_wire_layers`` (create each layer,
connect bottoms/tops, set it up, register its params) -> ``_mark_backward`` (which layers and
blobs need gradients) -> output blobs -> ``_share_weights``.
"""
from pycaffe_cli import net_debug
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError, layer_error, located
from pycaffe_cli.io.path_fields import check_path_fields
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.log import LOG
from pycaffe_cli.net_passes import filter_net, insert_splits
from pycaffe_cli.proto_echo import net_text
from pycaffe_cli.sizes import check_net_memory
from pycaffe_cli.proto import caffe_pb2

FLOAT_BYTES = 4


class Net:
    """A network in one phase.

    Args:
        param: a (current-format) caffe.NetParameter.
        phase, level, stages: override ``param.state`` (as Caffe's Net constructor does).
    """

    def __init__(self, param, phase=None, level=None, stages=None):
        check_net_memory(param)
        param = _with_state(param, phase, level, stages)
        self.name = param.name
        self.phase = param.state.phase
        filtered = filter_net(param)
        check_path_fields(filtered)
        LOG.info("Initializing net from parameters: \n" + net_text(filtered))
        self._reset_tables()
        self._wire_layers(insert_splits(filtered))
        self._mark_backward(filtered.force_backward)
        self._collect_outputs()
        self._share_weights()
        self.debug_info = filtered.debug_info
        self.callbacks = {"before_forward": [], "after_forward": [], "before_backward": [],
                          "after_backward": []}
        LOG.info("Network initialization done.")

    @classmethod
    def from_file(cls, path, phase, level=0, stages=()):
        """Read, upgrade and build a net prototxt; errors point at the file and layer line."""
        from pycaffe_cli.io.prototxt import read_net_param, locate_layer
        from pycaffe_cli.io.upgrade import upgrade_net
        param = upgrade_net(read_net_param(path), source=path)
        try:
            return cls(param, phase, level, stages)
        except CaffeError as error:
            where = locate_layer(path, error.layer) if error.layer else path
            raise located(error, where) from None

    # --- construction --------------------------------------------------------------------
    def _reset_tables(self):
        self.layers, self.layer_names = [], []
        self.bottom_vecs, self.top_vecs, self.bottom_ids, self.top_ids = [], [], [], []
        self.blobs, self.blob_names, self._blob_index = [], [], {}
        self.blob_need_backward, self.blob_loss_weights = [], []
        self.bottom_need_backward, self.layer_need_backward = [], []
        self.input_blob_indices, self.output_blob_indices = [], []
        self.params, self.param_owners, self.param_layer_indices = [], [], []
        self.param_id_vecs, self.param_display_names, self._param_names_index = [], [], {}
        self.learnable_params, self.learnable_param_ids = [], []
        self.params_lr, self.params_weight_decay = [], []
        self._has_params_lr, self._has_params_decay = [], []
        self.memory_used = 0

    def _wire_layers(self, param):
        available = {}
        for layer_param in param.layer:
            if not layer_param.HasField("phase"):
                layer_param.phase = self.phase
            self._add_layer(layer_param, available)
        self._available = available

    def _add_layer(self, layer_param, available):
        layer_id = len(self.layers)
        if layer_param.propagate_down and len(layer_param.propagate_down) != len(
                layer_param.bottom):
            raise layer_error(layer_param.name, "propagate_down must be given once per bottom "
                                                f"({len(layer_param.bottom)})")
        layer = create_layer(layer_param)
        self.layers.append(layer)
        self.layer_names.append(layer_param.name)
        LOG.info(f"Creating Layer {layer_param.name}")
        self.bottom_vecs.append([])
        self.bottom_ids.append([])
        self.bottom_need_backward.append([])
        self.top_vecs.append([])
        self.top_ids.append([])
        self.param_id_vecs.append([])
        need_backward = False
        for j, name in enumerate(layer_param.bottom):
            need_backward |= self._append_bottom(layer_id, j, name, available)
        for j, name in enumerate(layer_param.top):
            self._append_top(layer_id, j, name, available)
        if layer.auto_top_blobs:
            wanted = max(layer.min_num_top or 0, layer.exact_num_top or 0)
            for j in range(len(layer_param.top), wanted):
                self._append_top(layer_id, j, None, None)
        self._set_up_layer(layer_id)
        need_backward |= self._append_params(layer_id)
        self.layer_need_backward.append(need_backward)
        if need_backward:
            for blob_id in self.top_ids[layer_id]:
                self.blob_need_backward[blob_id] = True

    def _append_bottom(self, layer_id, bottom_id, name, available):
        layer_param = self.layers[layer_id].param
        if name not in available:
            raise layer_error(layer_param.name, f'unknown bottom blob "{name}" (bottom index '
                                                f'{bottom_id})')
        blob_id = available.pop(name)
        LOG.info(f"{layer_param.name} <- {name}")
        self.bottom_vecs[layer_id].append(self.blobs[blob_id])
        self.bottom_ids[layer_id].append(blob_id)
        need = self.blob_need_backward[blob_id]
        if layer_param.propagate_down:
            need = layer_param.propagate_down[bottom_id]
        self.bottom_need_backward[layer_id].append(need)
        return self.blob_need_backward[blob_id]

    def _append_top(self, layer_id, top_id, name, available):
        layer_param = self.layers[layer_id].param
        in_place = (name is not None and top_id < len(layer_param.bottom)
                    and layer_param.bottom[top_id] == name)
        if in_place:
            self.layers[layer_id].check_in_place(name)
            LOG.info(f"{layer_param.name} -> {name} (in-place)")
            blob_id = self.bottom_ids[layer_id][top_id]
        else:
            if name is not None and name in self._blob_index:
                raise layer_error(layer_param.name, f'top blob "{name}" produced by multiple '
                                                    "sources")
            LOG.info(f"{layer_param.name} -> {name or '(automatic)'}")
            blob_id = self._new_blob(name or "(automatic)", register=name is not None)
        if available is not None:
            available[name] = blob_id
        self.top_vecs[layer_id].append(self.blobs[blob_id])
        self.top_ids[layer_id].append(blob_id)
        if layer_param.type == "Input":
            self.input_blob_indices.append(blob_id)

    def _new_blob(self, name, register):
        blob_id = len(self.blobs)
        self.blobs.append(Blob())
        self.blob_names.append(name)
        self.blob_need_backward.append(False)
        self.blob_loss_weights.append(0.0)
        if register:
            self._blob_index[name] = blob_id
        return blob_id

    def _set_up_layer(self, layer_id):
        layer, name = self.layers[layer_id], self.layer_names[layer_id]
        layer.setup(self.bottom_vecs[layer_id], self.top_vecs[layer_id])
        LOG.info(f"Setting up {name}")
        for top_id, blob in enumerate(self.top_vecs[layer_id]):
            LOG.info(f"Top shape: {blob.shape_string()}")
            weight = layer.loss_weights[top_id]
            if weight:
                LOG.info(f"    with loss weight {weight:g}")
            self.blob_loss_weights[self.top_ids[layer_id][top_id]] = weight
            self.memory_used += blob.count()
        LOG.info(f"Memory required for data: {self.memory_used * FLOAT_BYTES}")

    def _append_params(self, layer_id):
        layer = self.layers[layer_id]
        specs = layer.param.param
        if len(specs) > len(layer.blobs):
            raise layer_error(layer.name, f"too many param specs ({len(specs)}) for a layer "
                                          f"with {len(layer.blobs)} learnable blob(s)")
        need_backward = False
        for param_id in range(len(layer.blobs)):
            spec = specs[param_id] if param_id < len(specs) else caffe_pb2.ParamSpec()
            self._append_param(layer_id, param_id, spec)
            learns = spec.lr_mult != 0
            layer.param_propagate_down[param_id] = learns
            need_backward |= learns
        return need_backward

    def _append_param(self, layer_id, param_id, spec):
        name = spec.name
        self.param_display_names.append(name or str(param_id))
        net_param_id = len(self.params)
        self.params.append(self.layers[layer_id].blobs[param_id])
        self.param_id_vecs[layer_id].append(net_param_id)
        self.param_layer_indices.append((layer_id, param_id))
        if not name or name not in self._param_names_index:
            self.param_owners.append(-1)
            if name:
                self._param_names_index[name] = net_param_id
            self.learnable_param_ids.append(len(self.learnable_params))
            self.learnable_params.append(self.params[net_param_id])
            self._has_params_lr.append(spec.HasField("lr_mult"))
            self._has_params_decay.append(spec.HasField("decay_mult"))
            self.params_lr.append(spec.lr_mult)
            self.params_weight_decay.append(spec.decay_mult)
            return
        owner_id = self._param_names_index[name]
        self.param_owners.append(owner_id)
        self._check_shared_shape(layer_id, param_id, spec, owner_id)
        learnable_id = self.learnable_param_ids[owner_id]
        self.learnable_param_ids.append(learnable_id)
        self._merge_shared_mult(learnable_id, spec, "lr_mult", self._has_params_lr,
                                self.params_lr, layer_id)
        self._merge_shared_mult(learnable_id, spec, "decay_mult", self._has_params_decay,
                                self.params_weight_decay, layer_id)

    def _check_shared_shape(self, layer_id, param_id, spec, owner_id):
        owner_layer, owner_param = self.param_layer_indices[owner_id]
        owner_name = self.layer_names[owner_layer]
        LOG.info(f"Sharing parameters '{spec.name}' owned by layer '{owner_name}', param "
                 f"index {owner_param}")
        mine = self.layers[layer_id].blobs[param_id]
        owner = self.params[owner_id]
        if spec.share_mode == caffe_pb2.ParamSpec.PERMISSIVE:
            ok, what = mine.count() == owner.count(), "count"
        else:
            ok, what = mine.shape == owner.shape, "shape"
        if not ok:
            raise layer_error(self.layer_names[layer_id], f"cannot share param '{spec.name}' "
                              f"owned by layer '{owner_name}': {what} mismatch (owner "
                              f"{owner.shape_string()}, this layer {mine.shape_string()})")

    def _merge_shared_mult(self, learnable_id, spec, field, has, values, layer_id):
        if not spec.HasField(field):
            return
        value = getattr(spec, field)
        if has[learnable_id] and values[learnable_id] != value:
            raise layer_error(self.layer_names[layer_id],
                              f"shared param '{spec.name}' has mismatched {field}")
        has[learnable_id] = True
        values[learnable_id] = value

    def _mark_backward(self, force_backward):
        under_loss, skip = set(), set()
        for layer_id in reversed(range(len(self.layers))):
            self._mark_layer_backward(layer_id, under_loss, skip)
        if force_backward:
            self._force_backward()

    def _mark_layer_backward(self, layer_id, under_loss, skip):
        layer = self.layers[layer_id]
        top_names = [self.blob_names[i] for i in self.top_ids[layer_id]]
        contributes = any(layer.loss_weights[j] or name in under_loss
                          for j, name in enumerate(top_names))
        skip_down = all(name in skip for name in top_names)
        needs = self.bottom_need_backward[layer_id]
        if self.layer_need_backward[layer_id] and skip_down:
            self.layer_need_backward[layer_id] = False
            needs[:] = [False] * len(needs)
        if not contributes:
            self.layer_need_backward[layer_id] = False
        verdict = "needs" if self.layer_need_backward[layer_id] else "does not need"
        LOG.info(f"{self.layer_names[layer_id]} {verdict} backward computation.")
        for j, blob_id in enumerate(self.bottom_ids[layer_id]):
            if contributes:
                under_loss.add(self.blob_names[blob_id])
            else:
                needs[j] = False
            if not needs[j]:
                skip.add(self.blob_names[blob_id])

    def _force_backward(self):
        for layer_id, layer in enumerate(self.layers):
            self.layer_need_backward[layer_id] = True
            needs = self.bottom_need_backward[layer_id]
            for j, blob_id in enumerate(self.bottom_ids[layer_id]):
                needs[j] = needs[j] or layer.allow_force_backward(j)
                self.blob_need_backward[blob_id] |= needs[j]
            layer.param_propagate_down[:] = [True] * len(layer.blobs)

    def _collect_outputs(self):
        for name in sorted(self._available):
            LOG.info(f"This network produces output {name}")
            self.output_blob_indices.append(self._available[name])
        del self._available

    def _share_weights(self):
        for blob, owner_id in zip(self.params, self.param_owners):
            if owner_id >= 0:
                blob.share_data(self.params[owner_id])
                blob.share_diff(self.params[owner_id])

    # --- running -------------------------------------------------------------------------
    def forward(self, start=0, end=None):
        """Run layers start..end (inclusive) forward; return the summed weighted loss."""
        end = len(self.layers) - 1 if end is None else end
        before, after = self.callbacks["before_forward"], self.callbacks["after_forward"]
        loss = 0.0
        for i in range(start, end + 1):
            for function in before:
                function(i)
            loss += self.layers[i].forward(self.bottom_vecs[i], self.top_vecs[i])
            if self.debug_info:
                net_debug.log_forward(self, i)
            for function in after:
                function(i)
        return loss

    def backward(self, start=None, end=0):
        """Run layers start..end (inclusive, descending) backward where needed."""
        start = len(self.layers) - 1 if start is None else start
        before, after = self.callbacks["before_backward"], self.callbacks["after_backward"]
        for i in range(start, end - 1, -1):
            for function in before:
                function(i)
            if self.layer_need_backward[i]:
                self.layers[i].backward(self.top_vecs[i], self.bottom_need_backward[i],
                                        self.bottom_vecs[i])
                if self.debug_info:
                    net_debug.log_backward(self, i)
            for function in after:
                function(i)
        if self.debug_info and start == len(self.layers) - 1 and end == 0:
            net_debug.log_param_norms(self)

    def add_callback(self, when, function):
        """Call ``function(layer_index)`` around every layer's pass (Caffe's Net callbacks);
        ``when`` is before_forward, after_forward, before_backward or after_backward."""
        if when not in self.callbacks:
            raise CaffeError(f"unknown net callback {when!r} (known: "
                             f"{', '.join(self.callbacks)})")
        self.callbacks[when].append(function)

    def forward_backward(self):
        loss = self.forward()
        self.backward()
        return loss

    def reshape(self):
        for i, layer in enumerate(self.layers):
            layer.reshape(self.bottom_vecs[i], self.top_vecs[i])

    def update(self):
        """Apply every learnable param's diff: ``data -= diff``."""
        for blob in self.learnable_params:
            blob.update()

    def clear_param_diffs(self):
        for blob in self.learnable_params:
            blob.zero_diff()

    # --- lookup --------------------------------------------------------------------------
    def has_blob(self, name):
        return name in self._blob_index

    def blob_by_name(self, name):
        if name not in self._blob_index:
            raise CaffeError(f'net "{self.name}" has no blob named "{name}"')
        return self.blobs[self._blob_index[name]]

    def has_layer(self, name):
        return name in self.layer_names

    def layer_by_name(self, name):
        if name not in self.layer_names:
            raise CaffeError(f'net "{self.name}" has no layer named "{name}"')
        return self.layers[self.layer_names.index(name)]

    @property
    def input_blobs(self):
        return [self.blobs[i] for i in self.input_blob_indices]

    @property
    def output_blobs(self):
        return [self.blobs[i] for i in self.output_blob_indices]


def _with_state(param, phase, level, stages):
    copy = caffe_pb2.NetParameter()
    copy.CopyFrom(param)
    if phase is not None:
        copy.state.phase = phase
    if level is not None:
        copy.state.level = level
    if stages is not None:
        del copy.state.stage[:]
        copy.state.stage.extend(stages)
    return copy
