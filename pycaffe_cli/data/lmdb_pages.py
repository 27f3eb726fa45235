"""Reading Caffe's LMDB databases page by page, checking each page before it is used.

liblmdb trusts its file: it follows the page numbers and offsets it finds in ``data.mdb``
through a memory map, so one flipped byte in a node offset, or a truncated file, makes it
read past the end of the file and the process dies of SIGBUS (py-lmdb cannot turn that into
an exception). Caffe's databases use a small part of the format -- the one unnamed database,
no duplicate keys -- so pycaffe reads them itself, with ``os.pread``, and checks every page it
reads: damage is one CaffeError naming the file and the page, never a crash or a hang. The
checks cost nothing up front; each page is checked when the cursor first reaches it. Writing
still goes through py-lmdb (db.py).

The format (liblmdb's mdb.c; 64-bit little-endian builds, data version 1):

- The file is pages of ``psize`` bytes. Pages 0 and 1 are meta pages; the one with the larger
  transaction id is current.
- Page header (16 bytes): page number u64, pad u16, flags u16, lower u16, upper u16; an
  overflow page holds its page count (u32) in lower/upper.
- Meta page, after the header: magic u32, version u32, address u64, map size u64, two
  database records (free pages, main) of pad u32 (the free one's: psize), flags u16,
  depth u16, branch / leaf / overflow page counts, entries and root page (u64 each); then the
  last page number u64 and the transaction id u64.
- Branch and leaf pages: ``(lower - 16) / 2`` u16 node offsets after the header, nodes from
  ``upper`` to the end. A node is lo u16, hi u16, flags u16, key size u16, the key, the data.
  Leaf: the data size is ``lo | hi << 16``; the data follows the key, or (flag BIGDATA) the
  key is followed by the u64 number of the overflow pages that hold the data after their
  header. Branch: the child's page number is ``lo | hi << 16 | flags << 32``; the first
  node's key is empty (it stands for everything below the second key).
"""
import bisect
import os
import struct
import weakref

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.io.input_files import shown

_HEADER = struct.Struct("<QHHHH")           # page number, pad, flags, lower, upper
_META = struct.Struct("<II16x")            # magic, version (address, map size skipped)
_DATABASE = struct.Struct("<IHH24xQQ")     # pad, flags, depth, (page counts), entries, root
_META_TAIL = struct.Struct("<QQ")          # last page number, transaction id
_NODE = struct.Struct("<HHHH")             # lo, hi, flags, key size
_PGNO = struct.Struct("<Q")
_OVERFLOW_PAGES = struct.Struct("<I")
HEADER_SIZE = _HEADER.size
_META_SIZE = HEADER_SIZE + _META.size + 2 * _DATABASE.size + _META_TAIL.size

MAGIC = 0xBEEFC0DE
DATA_VERSION = 1
P_BRANCH, P_LEAF, P_OVERFLOW, P_META = 0x01, 0x02, 0x04, 0x08
_KIND_FLAGS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40   # + LEAF2, SUBP
F_BIGDATA, F_DUPDATA = 0x01, 0x04
NO_ROOT = 2 ** 64 - 1
# REVERSEKEY, DUPSORT, INTEGERKEY: key orders or layouts that Caffe never writes
_FOREIGN_DB_FLAGS = 0x02 | 0x04 | 0x08
_MAX_DEPTH = 32   # liblmdb's CURSOR_STACK


class LMDBPages:
    """The committed main database of ``<path>/data.mdb``, read without liblmdb.

    Raises (here and in the cursors):
        CaffeError: the file cannot be read, is not an LMDB, or is damaged; the message names
            the database and, for damage, the page.
    """

    def __init__(self, path):
        self.path = path
        try:
            fd = os.open(os.path.join(path, "data.mdb"), os.O_RDONLY)
        except OSError as error:
            raise CaffeError(f"cannot open LMDB '{shown(path)}': data.mdb: "
                             f"{error.strerror or error}") from None
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)
        try:
            self._file_size = os.fstat(fd).st_size
            self._read_meta()
        except BaseException:
            self.close()
            raise

    def close(self):
        self._closer()

    def __len__(self):
        return self.entries

    def cursor(self):
        return PageCursor(self)

    # --- meta --------------------------------------------------------------------------
    def _read_meta(self):
        first = self._meta_page(0, 0)
        second = self._meta_page(1, first["psize"])
        meta = second if second["txnid"] > first["txnid"] else first
        self.psize, self.last_page = meta["psize"], meta["last"]
        needed = (self.last_page + 1) * self.psize
        if self._file_size < needed:
            raise self.damaged(f"data.mdb has {self._file_size} bytes, but its meta page "
                               f"counts {self.last_page + 1} pages ({needed} bytes): the file "
                               "is truncated")
        self.depth, self.entries, self.root = meta["depth"], meta["entries"], meta["root"]
        if meta["flags"] & _FOREIGN_DB_FLAGS:
            raise self.damaged(f"its database flags (0x{meta['flags']:x}) ask for a key order "
                               "or duplicate keys, which Caffe's databases never have")
        if self.root == NO_ROOT:
            self.root = None
        elif not 2 <= self.root <= self.last_page or not 1 <= self.depth <= _MAX_DEPTH:
            raise self.damaged(f"the meta page's root page {self.root} (depth {self.depth}) "
                               f"is impossible in a file of {self.last_page + 1} pages")

    def _meta_page(self, number, offset):
        data = self._read(offset, _META_SIZE, f"meta page {number}")
        flags = _HEADER.unpack_from(data)[2]
        magic, version = _META.unpack_from(data, HEADER_SIZE)
        if not flags & P_META or magic != MAGIC:
            raise CaffeError(f"cannot open LMDB '{shown(self.path)}': data.mdb is not an LMDB "
                             f"file (meta page {number} is damaged or missing)")
        if version != DATA_VERSION:
            raise CaffeError(f"cannot open LMDB '{shown(self.path)}': data.mdb has LMDB data "
                             f"version {version}; only version {DATA_VERSION} can be read")
        free_start = HEADER_SIZE + _META.size
        psize = _DATABASE.unpack_from(data, free_start)[0]
        flags, depth, entries, root = _DATABASE.unpack_from(data, free_start + _DATABASE.size)[1:]
        last, txnid = _META_TAIL.unpack_from(data, free_start + 2 * _DATABASE.size)
        if psize < 512 or psize > 65536 or psize & (psize - 1) or last < 1:
            raise self.damaged(f"meta page {number} is damaged (page size {psize}, last "
                               f"page {last})")
        return dict(psize=psize, flags=flags, depth=depth, entries=entries, root=root,
                    last=last, txnid=txnid)

    # --- pages -------------------------------------------------------------------------
    def damaged(self, detail):
        return CaffeError(f"LMDB '{shown(self.path)}' is damaged: {detail}")

    def _read(self, offset, size, what):
        try:
            data = os.pread(self._fd, size, offset)
        except OSError as error:
            raise CaffeError(f"cannot read LMDB '{shown(self.path)}': data.mdb: "
                             f"{error.strerror or error}") from None
        if len(data) != size:
            raise self.damaged(f"data.mdb ends inside {what}")
        return data

    def page(self, number, level):
        """The checked branch page (``level`` < depth) or leaf page (``level`` == depth)."""
        if not 2 <= number <= self.last_page:
            raise self.damaged(f"a branch page points to page {number}, outside the file's "
                               f"{self.last_page + 1} pages")
        data = self._read(number * self.psize, self.psize, f"page {number}")
        leaf = level == self.depth
        return Page(number, data, leaf, self)

    def overflow_value(self, number, size):
        """The ``size`` bytes of data stored on the overflow pages from ``number`` on."""
        header = self._read(number * self.psize, HEADER_SIZE, f"page {number}")
        found, _, flags = _HEADER.unpack_from(header)[:3]
        pages = _OVERFLOW_PAGES.unpack_from(header, 12)[0]
        if (found != number or (flags & _KIND_FLAGS) != P_OVERFLOW
                or pages * self.psize < HEADER_SIZE + size
                or number + pages - 1 > self.last_page):
            raise self.damaged(f"page {number} is not the overflow page a record's "
                               f"{size} bytes of data should be on")
        return self._read(number * self.psize + HEADER_SIZE, size, f"overflow page {number}")


class Page:
    """A checked branch or leaf page: its keys, and the children (branch) or the values
    (leaf: bytes, or ``(overflow page, size)``)."""

    __slots__ = ("number", "leaf", "keys", "items")

    def __init__(self, number, data, leaf, pages):
        self.number, self.leaf = number, leaf
        found, _, flags, lower, upper = _HEADER.unpack_from(data)
        kind = P_LEAF if leaf else P_BRANCH
        if found != number or (flags & _KIND_FLAGS) != kind:
            raise pages.damaged(f"page {number} is not the {'leaf' if leaf else 'branch'} page "
                                "the tree points to (its header is damaged, or a page number "
                                "pointing to it is)")
        psize = len(data)
        if not HEADER_SIZE < lower <= upper <= psize or lower % 2:
            raise pages.damaged(f"page {number}'s header is damaged (lower {lower}, "
                                f"upper {upper})")
        offsets = struct.unpack_from(f"<{(lower - HEADER_SIZE) // 2}H", data, HEADER_SIZE)
        self.keys, self.items = [], []
        for index, offset in enumerate(offsets):
            self._add_node(data, index, offset, upper, pages)

    def _add_node(self, data, index, offset, upper, pages):
        psize = len(data)
        if not upper <= offset <= psize - _NODE.size:
            raise pages.damaged(f"page {self.number}: node {index} lies outside the page")
        lo, hi, flags, key_size = _NODE.unpack_from(data, offset)
        key_end = offset + _NODE.size + key_size
        if key_end > psize:
            raise pages.damaged(f"page {self.number}: node {index}'s key runs past the page")
        self.keys.append(data[offset + _NODE.size:key_end])
        if not self.leaf:
            self.items.append(lo | hi << 16 | flags << 32)
            return
        size = lo | hi << 16
        if flags & F_DUPDATA:
            raise pages.damaged(f"page {self.number}: node {index} holds duplicate keys, which "
                                "Caffe's databases never have")
        if not flags & F_BIGDATA:
            if key_end + size > psize:
                raise pages.damaged(f"page {self.number}: node {index}'s {size} bytes of data "
                                    "run past the page")
            self.items.append(data[key_end:key_end + size])
            return
        if key_end + _PGNO.size > psize:
            raise pages.damaged(f"page {self.number}: node {index} lies outside the page")
        first = _PGNO.unpack_from(data, key_end)[0]
        count = -(-(HEADER_SIZE + size) // psize)
        if not 2 <= first or first + count - 1 > pages.last_page:
            raise pages.damaged(f"page {self.number}: node {index}'s {size} bytes of data on "
                                f"page {first} would run past the file's last page "
                                f"{pages.last_page}")
        self.items.append((first, size))


class PageCursor:
    """A read cursor over the keys in order: a path of (page, index) from the root to a leaf;
    empty when it is past the last record (or the database is empty)."""

    def __init__(self, pages):
        self._pages = pages
        self._path = []
        self.seek_to_first()

    def seek_to_first(self):
        self._path = []
        if self._pages.root is not None:
            self._descend(self._pages.root, 1, lambda page: 0)

    def seek(self, key):
        """Move to ``key`` (bytes); False (and no record) if the database has no such key."""
        self._path = []
        if self._pages.root is None:
            return False
        self._descend(self._pages.root, 1, lambda page: _branch_index(page, key))
        page = self._path[-1][0]
        index = bisect.bisect_left(page.keys, key)
        if index < len(page.keys) and page.keys[index] == key:
            self._path[-1][1] = index
            return True
        self._path = []
        return False

    def _descend(self, number, level, choose):
        """Walk from page ``number`` at ``level`` down to a leaf, taking ``choose(page)``
        in each branch page and the first record of the leaf."""
        while True:
            page = self._pages.page(number, level)   # it has at least one node
            if page.leaf:
                self._path.append([page, 0])
                return
            index = choose(page)
            self._path.append([page, index])
            number, level = page.items[index], level + 1

    def next(self):
        while self._path:
            frame = self._path[-1]
            frame[1] += 1
            if frame[1] < len(frame[0].keys):
                break
            self._path.pop()
        if not self._path:
            return
        page, index = self._path[-1]
        if not page.leaf:
            self._descend(page.items[index], len(self._path) + 1, lambda p: 0)

    def valid(self):
        return bool(self._path)

    def key(self):
        page, index = self._path[-1]
        return page.keys[index]

    def value(self):
        page, index = self._path[-1]
        item = page.items[index]
        if isinstance(item, tuple):
            return self._pages.overflow_value(*item)
        return item


def _branch_index(page, key):
    """The child whose keys include ``key``: the last node whose key is <= ``key`` (node 0,
    whose key is empty, when none is)."""
    return bisect.bisect_right(page.keys, key, 1) - 1
