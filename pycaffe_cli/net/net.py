"""Net: a DAG of layers over named blobs, built from a NetParameter.

Construction is a short pipeline (Caffe's Net::Init, split into named steps):
``filter_net`` (NetState rules) -> ``insert_splits`` -> ``_wire_layers`` (create each layer,
connect bottoms/tops, set it up, register its params) -> ``_mark_backward`` (which layers and
blobs need gradients) -> output blobs -> ``_share_weights``.

What the net knows about each layer, blob and param lives in one record each (``entries.py``):
``layer_entries``, ``blob_entries``, ``param_entries`` and ``learnable_entries``.
"""
from pycaffe_cli.net import debug as net_debug
from pycaffe_cli.blob import Blob
from pycaffe_cli.errors import CaffeError, layer_error, located
from pycaffe_cli.io.path_fields import check_path_fields
from pycaffe_cli.layers.base import create_layer
from pycaffe_cli.log import LOG
from pycaffe_cli.net.entries import BlobEntry, LayerEntry, LearnableEntry, ParamEntry
from pycaffe_cli.net.passes import filter_net, insert_splits
from pycaffe_cli.proto_echo import net_text
from pycaffe_cli.sizes import FLOAT_BYTES, check_net_memory
from pycaffe_cli.proto import caffe_pb2


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
    def from_file(cls, path, phase, level=0, stages=(), edit=None):
        """Read, upgrade and build a net prototxt; errors point at the file and layer line.
        ``edit``, if given, maps the upgraded NetParameter to the one to build."""
        from pycaffe_cli.io.prototxt import read_net_param, locate_layer
        from pycaffe_cli.io.upgrade import upgrade_net
        param = upgrade_net(read_net_param(path), source=path)
        if edit is not None:
            param = edit(param)
        try:
            return cls(param, phase, level, stages)
        except CaffeError as error:
            where = locate_layer(path, error.layer) if error.layer else path
            raise located(error, where) from None

    # --- construction --------------------------------------------------------------------
    def _reset_tables(self):
        self.layer_entries, self.blob_entries = [], []
        self.param_entries, self.learnable_entries = [], []
        self._blob_index, self._param_names_index = {}, {}
        self.input_blob_indices, self.output_blob_indices = [], []
        self.memory_used = 0

    def _wire_layers(self, param):
        available = {}
        for layer_param in param.layer:
            if not layer_param.HasField("phase"):
                layer_param.phase = self.phase
            self._add_layer(layer_param, available)
        self._available = available

    def _add_layer(self, layer_param, available):
        if layer_param.propagate_down and len(layer_param.propagate_down) != len(
                layer_param.bottom):
            raise layer_error(layer_param.name, "propagate_down must be given once per bottom "
                                                f"({len(layer_param.bottom)})")
        layer = create_layer(layer_param)
        entry = LayerEntry(layer)
        self.layer_entries.append(entry)
        LOG.info(f"Creating Layer {layer_param.name}")
        need_backward = False
        for j, name in enumerate(layer_param.bottom):
            need_backward |= self._append_bottom(entry, j, name, available)
        for j, name in enumerate(layer_param.top):
            self._append_top(entry, j, name, available)
        if layer.auto_top_blobs:
            wanted = max(layer.min_num_top or 0, layer.exact_num_top or 0)
            for j in range(len(layer_param.top), wanted):
                self._append_top(entry, j, None, None)
        self._set_up_layer(entry)
        need_backward |= self._append_params(len(self.layer_entries) - 1)
        entry.need_backward = need_backward
        if need_backward:
            for blob_id in entry.top_ids:
                self.blob_entries[blob_id].need_backward = True

    def _append_bottom(self, entry, bottom_id, name, available):
        layer_param = entry.layer.param
        if name not in available:
            raise layer_error(layer_param.name, f'unknown bottom blob "{name}" (bottom index '
                                                f'{bottom_id})')
        blob_id = available.pop(name)
        LOG.info(f"{layer_param.name} <- {name}")
        blob_entry = self.blob_entries[blob_id]
        entry.bottoms.append(blob_entry.blob)
        entry.bottom_ids.append(blob_id)
        need = blob_entry.need_backward
        if layer_param.propagate_down:
            need = layer_param.propagate_down[bottom_id]
        entry.bottom_need_backward.append(need)
        return blob_entry.need_backward

    def _append_top(self, entry, top_id, name, available):
        layer_param = entry.layer.param
        in_place = (name is not None and top_id < len(layer_param.bottom)
                    and layer_param.bottom[top_id] == name)
        if in_place:
            entry.layer.check_in_place(name)
            LOG.info(f"{layer_param.name} -> {name} (in-place)")
            blob_id = entry.bottom_ids[top_id]
        else:
            if name is not None and name in self._blob_index:
                raise layer_error(layer_param.name, f'top blob "{name}" produced by multiple '
                                                    "sources")
            LOG.info(f"{layer_param.name} -> {name or '(automatic)'}")
            blob_id = self._new_blob(name or "(automatic)", register=name is not None)
        if available is not None:
            available[name] = blob_id
        entry.tops.append(self.blob_entries[blob_id].blob)
        entry.top_ids.append(blob_id)
        if layer_param.type == "Input":
            self.input_blob_indices.append(blob_id)

    def _new_blob(self, name, register):
        blob_id = len(self.blob_entries)
        self.blob_entries.append(BlobEntry(Blob(), name))
        if register:
            self._blob_index[name] = blob_id
        return blob_id

    def _set_up_layer(self, entry):
        layer = entry.layer
        layer.setup(entry.bottoms, entry.tops)
        LOG.info(f"Setting up {entry.name}")
        for top_id, blob in enumerate(entry.tops):
            LOG.info(f"Top shape: {blob.shape_string()}")
            weight = layer.loss_weights[top_id]
            if weight:
                LOG.info(f"    with loss weight {weight:g}")
            self.blob_entries[entry.top_ids[top_id]].loss_weight = weight
            self.memory_used += blob.count()
        LOG.info(f"Memory required for data: {self.memory_used * FLOAT_BYTES}")

    def _append_params(self, layer_id):
        layer = self.layer_entries[layer_id].layer
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
        name, layer_entry = spec.name, self.layer_entries[layer_id]
        blob = layer_entry.layer.blobs[param_id]
        net_param_id = len(self.param_entries)
        layer_entry.param_ids.append(net_param_id)
        if not name or name not in self._param_names_index:
            if name:
                self._param_names_index[name] = net_param_id
            owner, learnable_id = -1, len(self.learnable_entries)
            self.learnable_entries.append(LearnableEntry.from_spec(blob, spec))
        else:
            owner = self._param_names_index[name]
            self._check_shared_shape(layer_entry, blob, spec, owner)
            learnable_id = self.param_entries[owner].learnable_id
            self.learnable_entries[learnable_id].merge(spec, layer_entry.name)
        self.param_entries.append(ParamEntry(blob, owner, layer_id, param_id,
                                             name or str(param_id), learnable_id))

    def _check_shared_shape(self, layer_entry, mine, spec, owner_id):
        owner_entry = self.param_entries[owner_id]
        owner_name = self.layer_entries[owner_entry.layer_id].name
        LOG.info(f"Sharing parameters '{spec.name}' owned by layer '{owner_name}', param "
                 f"index {owner_entry.index}")
        owner = owner_entry.blob
        if spec.share_mode == caffe_pb2.ParamSpec.PERMISSIVE:
            ok, what = mine.count() == owner.count(), "count"
        else:
            ok, what = mine.shape == owner.shape, "shape"
        if not ok:
            raise layer_error(layer_entry.name, f"cannot share param '{spec.name}' "
                              f"owned by layer '{owner_name}': {what} mismatch (owner "
                              f"{owner.shape_string()}, this layer {mine.shape_string()})")

    def _mark_backward(self, force_backward):
        under_loss, skip = set(), set()
        for entry in reversed(self.layer_entries):
            self._mark_layer_backward(entry, under_loss, skip)
        if force_backward:
            self._force_backward()

    def _mark_layer_backward(self, entry, under_loss, skip):
        layer, blobs = entry.layer, self.blob_entries
        top_names = [blobs[i].name for i in entry.top_ids]
        contributes = any(layer.loss_weights[j] or name in under_loss
                          for j, name in enumerate(top_names))
        skip_down = all(name in skip for name in top_names)
        needs = entry.bottom_need_backward
        if entry.need_backward and skip_down:
            entry.need_backward = False
            needs[:] = [False] * len(needs)
        if not contributes:
            entry.need_backward = False
        verdict = "needs" if entry.need_backward else "does not need"
        LOG.info(f"{entry.name} {verdict} backward computation.")
        for j, blob_id in enumerate(entry.bottom_ids):
            if contributes:
                under_loss.add(blobs[blob_id].name)
            else:
                needs[j] = False
            if not needs[j]:
                skip.add(blobs[blob_id].name)

    def _force_backward(self):
        for entry in self.layer_entries:
            entry.need_backward = True
            needs, layer = entry.bottom_need_backward, entry.layer
            for j, blob_id in enumerate(entry.bottom_ids):
                needs[j] = needs[j] or layer.allow_force_backward(j)
                self.blob_entries[blob_id].need_backward |= needs[j]
            layer.param_propagate_down[:] = [True] * len(layer.blobs)

    def _collect_outputs(self):
        for name in sorted(self._available):
            LOG.info(f"This network produces output {name}")
            self.output_blob_indices.append(self._available[name])
        del self._available

    def _share_weights(self):
        for entry in self.param_entries:
            if entry.owner >= 0:
                owner = self.param_entries[entry.owner].blob
                entry.blob.share_data(owner)
                entry.blob.share_diff(owner)

    # --- running -------------------------------------------------------------------------
    def forward(self, start=0, end=None):
        """Run layers start..end (inclusive) forward; return the summed weighted loss."""
        entries = self.layer_entries
        end = len(entries) - 1 if end is None else end
        before, after = self.callbacks["before_forward"], self.callbacks["after_forward"]
        loss = 0.0
        for i in range(start, end + 1):
            for function in before:
                function(i)
            entry = entries[i]
            loss += entry.layer.forward(entry.bottoms, entry.tops)
            if self.debug_info:
                net_debug.log_forward(self, i)
            for function in after:
                function(i)
        return loss

    def backward(self, start=None, end=0):
        """Run layers start..end (inclusive, descending) backward where needed."""
        entries = self.layer_entries
        last = len(entries) - 1
        start = last if start is None else start
        before, after = self.callbacks["before_backward"], self.callbacks["after_backward"]
        for i in range(start, end - 1, -1):
            for function in before:
                function(i)
            entry = entries[i]
            if entry.need_backward:
                entry.layer.backward(entry.tops, entry.bottom_need_backward, entry.bottoms)
                if self.debug_info:
                    net_debug.log_backward(self, i)
            for function in after:
                function(i)
        if self.debug_info and start == last and end == 0:
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
        for entry in self.layer_entries:
            entry.layer.reshape(entry.bottoms, entry.tops)

    def update(self):
        """Apply every learnable param's diff: ``data -= diff``."""
        for entry in self.learnable_entries:
            entry.blob.update()

    def clear_param_diffs(self):
        for entry in self.learnable_entries:
            entry.blob.zero_diff()

    # --- lookup --------------------------------------------------------------------------
    def has_blob(self, name):
        return name in self._blob_index

    def blob_by_name(self, name):
        if name not in self._blob_index:
            raise CaffeError(f'net "{self.name}" has no blob named "{name}"')
        return self.blob_entries[self._blob_index[name]].blob

    def layer_id(self, name):
        """The index of the first layer named ``name``, or None."""
        return next((i for i, entry in enumerate(self.layer_entries) if entry.name == name),
                    None)

    def has_layer(self, name):
        return self.layer_id(name) is not None

    def layer_by_name(self, name):
        layer_id = self.layer_id(name)
        if layer_id is None:
            raise CaffeError(f'net "{self.name}" has no layer named "{name}"')
        return self.layer_entries[layer_id].layer

    # Caffe's accessors (layers(), blobs(), ...): lists built from the records on each access;
    # code run per layer or per param in a pass reads the records instead.
    @property
    def layers(self):
        return [entry.layer for entry in self.layer_entries]

    @property
    def layer_names(self):
        return [entry.name for entry in self.layer_entries]

    @property
    def blobs(self):
        return [entry.blob for entry in self.blob_entries]

    @property
    def blob_names(self):
        return [entry.name for entry in self.blob_entries]

    @property
    def params(self):
        return [entry.blob for entry in self.param_entries]

    @property
    def learnable_params(self):
        return [entry.blob for entry in self.learnable_entries]

    @property
    def input_blobs(self):
        return [self.blob_entries[i].blob for i in self.input_blob_indices]

    @property
    def output_blobs(self):
        return [self.blob_entries[i].blob for i in self.output_blob_indices]


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
