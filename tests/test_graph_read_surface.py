"""The graph is read through its public surface: no module outside the one that defines
Graph, Operation and Tensor touches their private fields or methods, and no module reaches
into another asyncflow module's private names (``module._helper``). Checked with ``ast``."""
import ast
import inspect
import pathlib
import textwrap

from asyncflow.graph.graph import Graph, Operation, Tensor

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "asyncflow"
GRAPH_MODULE = pathlib.Path(inspect.getsourcefile(Graph)).resolve()


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def private_names(*classes):
    """The private fields (``__slots__`` and ``self._x =`` in any method) and private methods
    of ``classes``."""
    names = set()
    for cls in classes:
        names.update(n for n in getattr(cls, "__slots__", ()) if _private(n))
        names.update(n for n in vars(cls) if _private(n))
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id == "self" and _private(node.attr):
                names.add(node.attr)
    return names


GRAPH_PRIVATE = private_names(Graph, Operation, Tensor)


def graph_field_uses(source, names=GRAPH_PRIVATE):
    """``(line, expression)`` of each use of a private graph field on anything but ``self``
    or ``cls`` (another class's own ``self._name`` is its business)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in names and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append((node.lineno, ast.unparse(node)))
    return found


def _module_file(dotted):
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def private_module_uses(source):
    """``(line, expression)`` of each ``alias._name`` where ``alias`` is an asyncflow module."""
    tree = ast.parse(source)
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("asyncflow"):
            modules.update(a.asname or a.name for a in node.names
                           if _module_file(f"{node.module}.{a.name}"))
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names
                           if a.asname and a.name.startswith("asyncflow"))
    return [(node.lineno, ast.unparse(node)) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id in modules and _private(node.attr)]


def _package_sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, path.read_text()


def test_the_private_names_are_found_by_introspection():
    assert {"_inputs", "_outputs", "_attrs", "_control_inputs", "_consumers", "_is_ref",
            "_ops_by_name", "_scopes", "_control_flow_context"} <= GRAPH_PRIVATE


def test_the_checks_catch_a_private_read():
    source = ("from asyncflow.ops import control_flow as cf\n"
              "def f(op, t):\n    self_like = op._inputs[0]\n    return t._is_ref, "
              "cf._helper(self_like)\n"
              "class C:\n    def g(self):\n        return self._inputs\n")
    assert graph_field_uses(source) == [(3, "op._inputs"), (4, "t._is_ref")]
    assert private_module_uses(source) == [(4, "cf._helper")]


def test_no_module_reads_private_graph_fields():
    bad = [f"{path.relative_to(ROOT)}:{line}: {expr}"
           for path, source in _package_sources() if path.resolve() != GRAPH_MODULE
           for line, expr in graph_field_uses(source)]
    assert not bad, ("private Graph/Operation/Tensor fields read outside "
                     f"{GRAPH_MODULE.name} (use the public accessors):\n" + "\n".join(bad))


def test_no_module_calls_another_modules_private_helpers():
    bad = [f"{path.relative_to(ROOT)}:{line}: {expr}"
           for path, source in _package_sources()
           for line, expr in private_module_uses(source)]
    assert not bad, "private names of another module used (give them public names):\n" + \
        "\n".join(bad)
