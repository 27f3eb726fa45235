"""Blob memory for the inference plan: blobs whose lives do not overlap share one buffer.

A blob lives from the first step that writes it to the last step that reads or writes it,
counted in the net's layer indices (a chain's step sits at its producer's index). Blobs that
already use one memory (in place, or shared by Split, Flatten, Reshape, Concat of one...)
form one class that lives as long as its members together. Classes are given buffers
greedily in order of birth: a buffer whose last class has died is reused (the smallest that
is big enough, else the biggest, grown), else a new one is made; each buffer is one
SyncedMemory as big as the biggest class it holds.

A class may move into a shared buffer only when every member is written by a layer with
bottoms (not a data layer, Input, DummyData or Parameter, whose values persist), none is an
input, output, kept blob or loss, none shares memory with a param, and no layer that touches
it keeps views of its blobs (its inference hooks' ``keeps_blob_views``: Python layers). The
intervals are those of the net's own layer order too (a chain's step covers its links'
positions), so the plain ``Net.forward`` still computes the right outputs after the plan
moved the blobs; blobs the chains skip get fresh, unallocated memory of their own.

Reused or not, measured: a reused buffer is written by another layer, split between the
threads another way, so most of its lines were written last on the other core and move
across before each write; buffers of their own are written where nothing has touched them
since the last pass, so their lines come from far down the caches. Which costs more is the
machine's: where moving lines between cores was slow, reuse cost GoogLeNet at batch 1 4 ms
of a 31 ms pass, ResNet-50 6 ms of 60 and MobileNet v2 2-3 ms of 17-19; on another machine
buffers of their own cost MobileNet v2 9-15%, SqueezeNet 4-13% and ResNet-50 3-7%
(docs/kernel-choices.md, "One image's convolutions"). So in CPU mode, where buffers of their
own would take at most OWN_BUFFERS_SHARE of the memory the process may use
(``own_buffers_limit``) and differ from the shared ones, the plan keeps both layouts (``use``
switches, ``settle`` keeps one) and times passes in each before it settles
(inference/plan.py, ``LayoutTrial``); past that share, and on the GPU, where memory is what
the sharing is for, buffers are reused.

Concat without a copy: where a Concat's top holds its bottoms one after the other (nothing
before the concat axis but a batch of one, e.g. GoogLeNet's and SqueezeNet's at batch 1), in
CPU mode, each bottom becomes a view of its run of the top (``SyncedMemoryView``), so the
layers that write the bottoms write the top, and the Concat finds nothing to copy. The
bottoms then join the top's class. Only bottoms that could move anyway, that no later step
touches, that share memory with no other blob and that are no other such Concat's top or
bottom get views, all of a Concat's bottoms or none (the top may be shared: a Split after).
"""
from pycaffe_cli import backend
from pycaffe_cli.sizes import FLOAT_BYTES, physical_memory
from pycaffe_cli.synced_memory import SyncedMemory, SyncedMemoryView

# In CPU mode blobs may keep buffers of their own while together they take at most this
# share of the memory the process may use (see the module docstring).
OWN_BUFFERS_SHARE = 1 / 16


class MemoryPlan:
    """Which blobs share buffers, given the plan's steps (objects with ``at``, ``layer``,
    ``hooks``, ``bottom_ids``, ``top_ids``) and the blob ids that must keep their own
    memory."""

    def __init__(self, net, steps, protected, skipped):
        self.net = net
        self.skipped = list(skipped)
        self.touched = sorted({i for step in steps for i in step.bottom_ids + step.top_ids})
        self.before_bytes = _bytes(net, range(len(net.blob_entries)))
        self.lives, self.movable = _lives(net, steps, protected)
        self.aliases = _aliases(net, self.lives)
        self.concats = _concat_candidates(steps, self.lives, self.movable, self.aliases)
        self.joined = []  # [(Concat layer, top id, bottom ids)] given views at assign
        self.classes = []  # [(start, end, member ids)], made by assign
        self.buffer_count = 0
        self.after_bytes = self.before_bytes
        self.reused = True  # whether buffers are reused (see the module docstring)
        self.own_limit = 0  # bytes of buffers of their own allowed (own_buffers_limit)
        self.both = False  # whether both layouts are allowed, differ and are not settled
        self._needs = []  # each class's float count, by assign
        self._layouts = {}  # reused (bool) -> [(SyncedMemory, member ids)], made by use

    @property
    def moved(self):
        """How many blobs live in shared buffers."""
        return sum(len(members) for _, _, members in self.classes)

    def assign(self):
        """Give every movable class a buffer (sized for the blobs' current counts) and every
        skipped blob fresh memory of its own. Where both layouts are allowed (``both``), the
        blobs start with buffers of their own, as in Caffe."""
        blobs = [entry.blob for entry in self.net.blob_entries]
        for blob_id in self.skipped:
            blobs[blob_id].use_data_memory(SyncedMemory(blobs[blob_id].count()))
        cpu = backend.mode() is backend.Mode.CPU
        self.joined = [c for c in self.concats if cpu and blobs[c[1]].count(0, c[0]._axis) == 1]
        self.classes = _classes(self.net, self.lives, self.movable, self.aliases,
                                {b: top for _, top, bottoms in self.joined for b in bottoms})
        self._needs = [max(blobs[i].count() for i in members) for _, _, members in self.classes]
        self.own_limit = own_buffers_limit() if cpu else 0
        self.both = (cpu and sum(self._needs) * FLOAT_BYTES <= self.own_limit
                     and len(_packing(self.classes, self._needs, True)) < len(self.classes))
        self._layouts = {}
        self.use(not self.both)

    def use(self, reused):
        """Put the blobs in the buffers of one layout: reused (True) or each class its own
        (False); each layout's buffers are made once per ``assign``, so switching back and
        forth finds them already touched, and grown where a blob has grown since (a top
        whose shape follows the data, as DetectionOutput's)."""
        if reused not in self._layouts:
            self._layouts[reused] = [(SyncedMemory(size), members) for size, members
                                     in _packing(self.classes, self._needs, reused)]
        blobs = [entry.blob for entry in self.net.blob_entries]
        layout = self._layouts[reused]
        for index, (memory, members) in enumerate(layout):
            need = max(blobs[i].count() for i in members)
            if need > memory.size:
                memory = SyncedMemory(need)
                layout[index] = (memory, members)
            for blob_id in members:
                blobs[blob_id].use_data_memory(memory)
        for _, top, bottoms in self.joined:
            offset = 0
            for blob_id in bottoms:
                count = blobs[blob_id].count()
                blobs[blob_id].use_data_memory(
                    SyncedMemoryView(blobs[top].data_memory, offset, count))
                offset += count
        self.reused = reused
        self.buffer_count = len(self._layouts[reused])
        self.after_bytes = _bytes(self.net, self.touched)

    def settle(self, reused):
        """Keep one layout for good (``use``), letting the other's buffers go."""
        self.use(reused)
        self._layouts = {reused: self._layouts[reused]}
        self.both = False

    def release(self):
        """Give every moved blob memory of its own again (values are lost)."""
        for _, _, members in self.classes:
            for blob_id in members:
                blob = self.net.blob_entries[blob_id].blob
                blob.use_data_memory(SyncedMemory(blob.count()))


def _packing(classes, needs, reused):
    """[(buffer size, member ids)]: the classes (by start) given buffers greedily, a buffer
    whose last class has died taken again where ``reused`` (the smallest big enough, else the
    biggest, grown), else a new one."""
    buffers = []  # [size, end, [members...]]
    for (start, end, members), need in zip(classes, needs):
        free = [b for b in buffers if b[1] < start] if reused else []
        fits = [b for b in free if b[0] >= need]
        if fits:
            chosen = min(fits, key=lambda b: b[0])
        elif free:
            chosen = max(free, key=lambda b: b[0])
        else:
            chosen = [0, end, []]
            buffers.append(chosen)
        chosen[0], chosen[1] = max(chosen[0], need), end
        chosen[2].extend(members)
    return [(size, members) for size, _, members in buffers]


def own_buffers_limit():
    """Bytes of blob buffers the plan gives classes of their own in CPU mode:
    OWN_BUFFERS_SHARE of the memory this process may use (``sizes.physical_memory``); 0
    where that is unknown."""
    memory = physical_memory()
    return int(memory * OWN_BUFFERS_SHARE) if memory else 0


def _bytes(net, blob_ids):
    """Bytes of the distinct data memories the blobs use (a view's are its parent's)."""
    memories = {id(m): m for m in (getattr(memory, "parent", memory) for memory in
                                   (net.blob_entries[i].blob.data_memory for i in blob_ids))}
    return sum(m.size for m in memories.values()) * FLOAT_BYTES


def _lives(net, steps, protected):
    """({blob id: [first, last] layer index}, set of blob ids that may move)."""
    lives, movable, pinned = {}, set(), set(protected)
    for step in steps:
        if step.hooks.keeps_blob_views:
            pinned.update(step.bottom_ids + step.top_ids)
        for blob_id in step.bottom_ids:
            _touch(lives, blob_id, step.at, step.end)
        for blob_id in step.top_ids:
            _touch(lives, blob_id, step.at, step.end)
            if step.bottom_ids:
                movable.add(blob_id)
            else:
                pinned.add(blob_id)
    return lives, (movable - pinned) & set(lives)


def _touch(lives, blob_id, first, last):
    life = lives.setdefault(blob_id, [first, last])
    life[0], life[1] = min(life[0], first), max(life[1], last)


def _aliases(net, lives):
    """{blob id: the ids of the blobs that use its memory now (itself included)}: taken
    before the plan moves any blob."""
    owners = {}
    for blob_id in lives:
        owners.setdefault(id(net.blob_entries[blob_id].blob.data_memory), []).append(blob_id)
    return {blob_id: ids for ids in owners.values() for blob_id in ids}


def _concat_candidates(steps, lives, movable, aliases):
    """[(Concat layer, top id, bottom ids)] whose bottoms may become views of the top (see
    the module docstring) where the shapes allow it."""
    alone = {blob_id for blob_id, ids in aliases.items() if len(ids) == 1}
    found, claimed = [], set()
    for step in steps:
        bottoms, tops = step.bottom_ids, step.top_ids
        if step.layer.type != "Concat" or len(bottoms) < 2 or step.full:
            continue
        ids = set(bottoms) | set(tops)
        if (len(ids) == len(bottoms) + 1 and not ids & claimed and ids <= movable
                and set(bottoms) <= alone and all(lives[b][1] == step.at for b in bottoms)):
            found.append((step.layer, tops[0], list(bottoms)))
            claimed |= ids
    return found


def _classes(net, lives, movable, aliases, joined):
    """[(start, end, member ids)] of the movable alias classes, by start; ``joined`` maps
    blob ids to the blob whose class they join (Concat bottoms that view their top)."""
    params = {id(entry.blob.data_memory) for entry in net.param_entries}
    groups = {}
    for blob_id in lives:
        owner = min(aliases[joined.get(blob_id, blob_id)])
        groups.setdefault(owner, []).append(blob_id)
    classes = []
    for members in groups.values():
        memories = {id(net.blob_entries[i].blob.data_memory) for i in members}
        if memories & params or not all(i in movable for i in members):
            continue
        start = min(lives[i][0] for i in members)
        end = max(lives[i][1] for i in members)
        classes.append((start, end, members))
    classes.sort(key=lambda c: (c[0], c[1]))
    return classes
