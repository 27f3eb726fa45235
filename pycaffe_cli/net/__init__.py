"""The Net (Caffe's Net): ``net.py`` builds one from a NetParameter in a short pipeline of
passes (``passes.py``: filter by NetState, insert splits) over the entries that wire layers
to blobs (``entries.py``), and runs forward and backward; ``weights.py`` copies, shares and
saves its weights; ``debug.py`` prints Caffe's debug_info lines."""
