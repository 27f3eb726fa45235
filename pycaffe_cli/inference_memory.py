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
it keeps views of its blobs (Python layers). The intervals are those of the net's own layer
order too (a chain's step covers its links' positions), so the plain ``Net.forward`` still
computes the right outputs after the plan moved the blobs; blobs the chains skip get fresh,
unallocated memory of their own.
"""
from pycaffe_cli.sizes import FLOAT_BYTES
from pycaffe_cli.synced_memory import SyncedMemory


class MemoryPlan:
    """Which blobs share buffers, given the plan's steps (objects with ``at``, ``layer``,
    ``bottom_ids``, ``top_ids``) and the blob ids that must keep their own memory."""

    def __init__(self, net, steps, protected, skipped):
        self.net = net
        self.skipped = list(skipped)
        self.touched = sorted({i for step in steps for i in step.bottom_ids + step.top_ids})
        self.before_bytes = _bytes(net, range(len(net.blob_entries)))
        lives, movable = _lives(net, steps, protected)
        self.classes = _classes(net, lives, movable)
        self.buffer_count = 0
        self.after_bytes = self.before_bytes

    @property
    def moved(self):
        """How many blobs live in shared buffers."""
        return sum(len(members) for _, _, members in self.classes)

    def assign(self):
        """Give every movable class a buffer (sized for the blobs' current counts) and every
        skipped blob fresh memory of its own."""
        blobs = [entry.blob for entry in self.net.blob_entries]
        for blob_id in self.skipped:
            blobs[blob_id].use_data_memory(SyncedMemory(blobs[blob_id].count()))
        buffers = []  # [size, end, [members...]]
        for start, end, members in self.classes:
            need = max(blobs[i].count() for i in members)
            free = [b for b in buffers if b[1] < start]
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
        for size, _, members in buffers:
            memory = SyncedMemory(size)
            for blob_id in members:
                blobs[blob_id].use_data_memory(memory)
        self.buffer_count = len(buffers)
        self.after_bytes = _bytes(self.net, self.touched)

    def release(self):
        """Give every moved blob memory of its own again (values are lost)."""
        for _, _, members in self.classes:
            for blob_id in members:
                blob = self.net.blob_entries[blob_id].blob
                blob.use_data_memory(SyncedMemory(blob.count()))


def _bytes(net, blob_ids):
    """Bytes of the distinct data memories the blobs use."""
    memories = {id(m): m for m in (net.blob_entries[i].blob.data_memory for i in blob_ids)}
    return sum(m.size for m in memories.values()) * FLOAT_BYTES


def _lives(net, steps, protected):
    """({blob id: [first, last] layer index}, set of blob ids that may move)."""
    lives, movable, pinned = {}, set(), set(protected)
    for step in steps:
        layer = step.layer
        if layer.keeps_blob_views:
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


def _classes(net, lives, movable):
    """[(start, end, member ids)] of the movable alias classes, by start."""
    params = {id(entry.blob.data_memory) for entry in net.param_entries}
    groups = {}
    for blob_id in lives:
        memory = net.blob_entries[blob_id].blob.data_memory
        groups.setdefault(id(memory), []).append(blob_id)
    classes = []
    for key, members in groups.items():
        if key in params or not all(i in movable for i in members):
            continue
        start = min(lives[i][0] for i in members)
        end = max(lives[i][1] for i in members)
        classes.append((start, end, members))
    classes.sort(key=lambda c: (c[0], c[1]))
    return classes
