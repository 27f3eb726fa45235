"""A stand-in for ``pycaffe_cli.parallel.nccl.CupyNccl`` where there is no GPU (CI).

``FakeNccl`` offers the same calls (all_reduce, done, wait, bcast, all_gather, data_of,
diff_of, to_device, to_host, abort, close) on host numpy arrays, between the threads or
processes of one run over TCP on localhost: rank 0 is the hub, every call is an exchange of
bytes through it. Sums are taken in rank order. The "unique id" carries the hub's port
(``unique_id(port)``), as NCCL's carries its bootstrap address.
"""
import pickle
import socket
import struct
import time

import numpy as np

ID_PREFIX = b"fake-nccl:"


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def unique_id(port=None):
    """A 128-byte id naming the hub's port, as NCCL's ids are 128 bytes."""
    text = ID_PREFIX + str(port or free_port()).encode()
    return text.ljust(128, b"\0")


class FakeNccl:
    """Rank ``rank`` of ``size``, meeting the others at the port ``uid`` names."""

    xp = np

    def __init__(self, size, uid, rank, device=None, timeout=20.0):
        assert uid.startswith(ID_PREFIX), uid
        port = int(uid[len(ID_PREFIX):].rstrip(b"\0"))
        self.size, self.rank = size, rank
        self.calls = []
        if rank == 0:
            self._peers = self._accept(port, size - 1, timeout)
        else:
            self._hub = _connect(port, timeout)
            self._hub.settimeout(None)
            _send(self._hub, pickle.dumps(rank))

    @staticmethod
    def _accept(port, count, timeout):
        server = socket.create_server(("127.0.0.1", port))
        server.settimeout(timeout)
        peers = {}
        with server:
            while len(peers) < count:
                connection, _ = server.accept()
                connection.settimeout(None)
                peers[pickle.loads(_receive(connection))] = connection
        return [peers[rank] for rank in sorted(peers)]

    def _exchange(self, payload):
        """Every rank's ``payload`` (bytes), in rank order, on every rank."""
        if self.rank == 0:
            parts = [payload] + [_receive(peer) for peer in self._peers]
            message = pickle.dumps(parts)
            for peer in self._peers:
                _send(peer, message)
            return parts
        _send(self._hub, payload)
        return pickle.loads(_receive(self._hub))

    def all_reduce(self, array):
        self.calls.append(("all_reduce", array.size))
        parts = self._exchange(array.tobytes())
        total = np.frombuffer(parts[0], array.dtype).copy()
        for part in parts[1:]:
            total += np.frombuffer(part, array.dtype)
        array[:] = total
        return "event"

    @staticmethod
    def done(event):
        return True

    def wait(self, event):
        pass

    def bcast(self, array, root):
        self.calls.append(("bcast", array.size))
        parts = self._exchange(array.tobytes() if self.rank == root else b"")
        array[:] = np.frombuffer(parts[root], array.dtype)

    def all_gather(self, send, recv):
        self.calls.append(("all_gather", send.size))
        parts = self._exchange(send.tobytes())
        recv[:] = np.concatenate([np.frombuffer(part, send.dtype) for part in parts])

    @staticmethod
    def data_of(blob):
        return blob.flat_data

    @staticmethod
    def diff_of(blob):
        return blob.flat_diff

    @staticmethod
    def to_device(host):
        return np.array(host)

    @staticmethod
    def to_host(array):
        return np.asarray(array)

    def abort(self):
        self.close()

    def close(self):
        for connection in getattr(self, "_peers", []) + [getattr(self, "_hub", None)]:
            if connection is not None:
                connection.close()


def _connect(port, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=timeout)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _send(connection, payload):
    connection.sendall(struct.pack("!Q", len(payload)) + payload)


def _receive(connection):
    (length,) = struct.unpack("!Q", _exactly(connection, 8))
    return _exactly(connection, length)


def _exactly(connection, count):
    chunks, left = [], count
    while left:
        chunk = connection.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("a fake NCCL rank went away")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
