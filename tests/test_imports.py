"""The import graph of pycaffe, read from the source (ast; nothing is imported).

Modules: the engine ``pycaffe_cli`` (pycaffe_cli/, without pycaffe_cli/caffe), its layers
``pycaffe_cli.layers`` (layers/), ``pycaffe_cli.proto`` (proto/) and BVLC's interface
``caffe`` (pycaffe_cli/caffe/). An edge A -> B means A's source imports B, or a module inside
package B (importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so those count
too). ``from M import name`` is an edge to ``M.name`` when that is a module, else to ``M``.

Every import counts, also those inside functions: a function-level import is only deferred
(numba.cuda is imported in GPU mode only, say), it still ties the two modules together, and
"no import cycle anywhere" holds only if it counts. Imports by name at run time
(``importlib.import_module``: the layer registry loading every layer module, the command
registry, Python layers) are not edges; they load leaves on purpose.

Rules checked:
* no cycle (strongly connected component of more than one module, or a module importing
  itself);
* the engine never imports ``pycaffe_cli.layers.kernels`` (device code the engine needs is the
  CUDA runtime in ``pycaffe_cli.cuda``);
* ``pycaffe_cli.cuda`` imports nothing from ``pycaffe_cli.layers``;
* the rest of the engine reaches the layers only through their registry
  (``pycaffe_cli.layers.base``: the net builds layers by type name).
"""
import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = (  # import name, folder, subfolders that are other packages
    ("pycaffe_cli", REPO / "pycaffe_cli", ("caffe",)),
    ("pycaffe_cli.layers", REPO / "layers", ()),
    ("pycaffe_cli.proto", REPO / "proto", ()),
    ("caffe", REPO / "pycaffe_cli" / "caffe", ()),
)


def _modules():
    """{module name: (source path, is a package)} of every module in PACKAGES."""
    found = {}
    for name, folder, skip in PACKAGES:
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[0] in skip or "__pycache__" in parts:
                continue
            package = parts[-1] == "__init__"
            dotted = ".".join((name,) + (parts[:-1] if package else parts))
            found[dotted] = (path, package)
    return found


MODULES = _modules()


def _absolute(module, node):
    """The module an ImportFrom names, relative levels resolved."""
    if not node.level:
        return node.module
    path, package = MODULES[module]
    base = module.split(".")
    base = base[:len(base) - node.level + (1 if package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module, node):
    """The modules of ours one import statement names (before adding parent packages)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    source = _absolute(module, node)
    return [f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
            for alias in node.names]


def _known(name, importer):
    """``name`` and the parent packages importing it runs first, those that are modules of
    ours; the importer's own parent packages have run already, so they count only where named
    themselves."""
    parts = name.split(".")
    prefixes = (".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return [dotted for dotted in prefixes if dotted in MODULES and dotted != importer
            and (dotted == name or not importer.startswith(dotted + "."))]


def imports(module):
    """{imported module: line of the first import} for one of our modules."""
    tree = ast.parse(MODULES[module][0].read_text(), str(MODULES[module][0]))
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target in _targets(module, node):
                for name in _known(target, module):
                    found.setdefault(name, node.lineno)
    return found


GRAPH = {module: imports(module) for module in MODULES}
ENGINE = {m for m in MODULES if m.startswith("pycaffe_cli")
          and not m.startswith(("pycaffe_cli.layers", "pycaffe_cli.proto"))}


def strongly_connected(graph):
    """Tarjan's strongly connected components of ``graph`` (iterative)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    components.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(graph[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def _describe(component):
    members = set(component)
    return "; ".join(f"{a} -> {b} (line {line})" for a in sorted(members)
                     for b, line in sorted(GRAPH[a].items()) if b in members)


def test_the_walk_finds_the_packages_and_their_imports():
    assert {"pycaffe_cli.blob", "pycaffe_cli.cuda.memory", "pycaffe_cli.layers.relu",
            "pycaffe_cli.layers.kernels.cuda.pooling", "caffe.pycaffe",
            "pycaffe_cli.proto.caffe_pb2"} <= set(MODULES)
    assert "pycaffe_cli.cuda.launch" in GRAPH["pycaffe_cli.layers.relu"]
    assert "pycaffe_cli.cuda" in GRAPH["pycaffe_cli.layers.relu"]  # a package it runs first
    assert "pycaffe_cli.layers" not in GRAPH["pycaffe_cli.layers.relu"]  # its own package
    assert "pycaffe_cli.cuda.memory" in GRAPH["pycaffe_cli.synced_memory"]  # in a function
    # a family of layers as a subpackage: its modules import each other, not the package
    assert {"pycaffe_cli.layers.convolution", "pycaffe_cli.layers.convolution.base",
            "pycaffe_cli.layers.convolution.convolution",
            "pycaffe_cli.layers.kernels.cpu.pooling.max_pool"} <= set(MODULES)
    conv = GRAPH["pycaffe_cli.layers.convolution.convolution"]
    assert "pycaffe_cli.layers.convolution.base" in conv
    assert "pycaffe_cli.layers.convolution" not in conv  # its own package
    # a package's __init__ that re-exports its modules (the CPU pooling kernels' twin names)
    assert "pycaffe_cli.layers.kernels.cpu.pooling.max_pool" in \
        GRAPH["pycaffe_cli.layers.kernels.cpu.pooling"]


def test_strongly_connected_finds_a_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert sorted(map(sorted, strongly_connected(graph))) == [["a", "b", "c"], ["d"]]


def test_no_import_cycle():
    cycles = [_describe(c) for c in strongly_connected(GRAPH) if len(c) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("rule, importer, forbidden", [
    ("the engine uses the CUDA runtime in pycaffe_cli.cuda, not layer kernels",
     ENGINE.__contains__, "pycaffe_cli.layers.kernels"),
    ("the CUDA runtime sits below the layers", lambda m: m.startswith("pycaffe_cli.cuda"),
     "pycaffe_cli.layers"),
])
def test_import_direction(rule, importer, forbidden):
    wrong = [f"{module} -> {target} (line {line})" for module, targets in sorted(GRAPH.items())
             if importer(module) for target, line in sorted(targets.items())
             if target == forbidden or target.startswith(forbidden + ".")]
    assert not wrong, f"{rule}:\n" + "\n".join(wrong)


def test_the_engine_reaches_layers_through_the_registry_only():
    allowed = {"pycaffe_cli.layers", "pycaffe_cli.layers.base"}
    wrong = [f"{module} -> {target} (line {line})" for module, targets in sorted(GRAPH.items())
             if module in ENGINE
             for target, line in sorted(targets.items())
             if target.startswith("pycaffe_cli.layers") and target not in allowed]
    assert not wrong, "engine modules importing layer modules:\n" + "\n".join(wrong)


def test_a_bad_input_fails_before_numba_loads():
    # `pycaffe time --model missing` exits in ~0.15 s instead of ~0.45: the commands import
    # numba-backed modules (Datum decoding, the solvers) where they run, not at start-up
    import subprocess
    import sys
    probe = ("import sys; from pycaffe_cli.cli import main; "
             "code = main(['time', '--model', 'no/such/net.prototxt']); "
             "print(code, 'numba' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["1", "False"], done.stdout + done.stderr
    assert "no/such/net.prototxt" in done.stderr


MAX_MODULE_LINES = 400
GENERATED = {"pycaffe_cli.proto.caffe_pb2"}


def test_no_module_is_over_400_lines():
    """docs/architecture.md's "modules under 400 lines", for every module of pycaffe_cli/,
    layers/ and proto/ (the generated protobuf module aside)."""
    long = {name: lines for name, (path, _) in sorted(MODULES.items()) if name not in GENERATED
            for lines in [len(path.read_text().splitlines())] if lines > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_setup_cfg_installs_every_package():
    """setup.cfg lists its packages one by one: a package folder missing there would be left
    out of an installation (and out of make setup's links)."""
    import configparser
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    folders = {name for name, (path, package) in MODULES.items() if package}
    assert folders <= listed, f"packages missing from setup.cfg: {sorted(folders - listed)}"
