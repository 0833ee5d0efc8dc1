"""The layering rule of STYLE.md, checked by walking every import with ``ast``."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

# layer -> project layers it may import (besides itself)
ALLOWED = {
    "base": {"base"},
    "graph": {"base", "graph"},
    "ops": {"base", "graph", "ops"},
    "kernels": {"base", "kernels"},
    "compile": {"base", "graph", "ops", "compile"},
    "exec": {"base", "graph", "ops", "kernels", "compile", "exec"},
    "cluster": {"base", "graph", "ops", "kernels", "compile", "exec", "cluster", "transports"},
    "session": {"base", "graph", "ops", "kernels", "compile", "exec", "cluster", "session"},
    "top": {"base", "graph", "ops", "kernels", "compile", "exec", "cluster", "session", "top",
            "transports"},
    "transports": {"transports"},
}
BASE = {"errors", "dtypes", "device_names", "rendezvous_keys", "pending"}
FORBIDDEN_THIRD_PARTY = {
    "graph": {"trio", "aiohttp", "cupy"},
    "ops": {"trio", "aiohttp", "cupy"},
    "kernels": {"trio", "aiohttp", "cupy"},
    "compile": {"trio", "aiohttp", "cupy"},
    "exec": {"aiohttp"},
}


def layer_of(module):
    parts = module.split(".")
    if parts[0] == "transports":
        return "transports"
    if parts[0] != "asyncflow":
        return None
    if len(parts) == 1:
        return "top"
    head = parts[1]
    if head in BASE:
        return "base"
    if head in ("graph", "ops", "kernels", "compile", "exec", "cluster"):
        return head
    if head == "session":
        return "session"
    return "top"


def module_name(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path):
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            if name != "asyncflow":  # `from asyncflow import errors` is judged by its names
                yield name, node.lineno
            for alias in node.names:
                yield f"{name}.{alias.name}", node.lineno


def test_no_upward_imports():
    problems = []
    for package in ("asyncflow", "transports"):
        for path in sorted((ROOT / package).rglob("*.py")):
            mine = layer_of(module_name(path))
            for name, line in imports_of(path):
                target = layer_of(name)
                top = name.split(".")[0]
                if mine in FORBIDDEN_THIRD_PARTY and top in FORBIDDEN_THIRD_PARTY[mine]:
                    problems.append(f"{path.relative_to(ROOT)}:{line} ({mine}) imports {name}")
                if target is None:
                    continue
                if target not in ALLOWED[mine]:
                    problems.append(f"{path.relative_to(ROOT)}:{line} ({mine}) imports {name} ({target})")
    assert not problems, "upward or forbidden imports:\n" + "\n".join(problems)


def test_layer_table_knows_every_package():
    for path in (ROOT / "asyncflow").iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            assert layer_of(f"asyncflow.{path.name}") is not None


# Import circles being removed in parallel by other work; each entry allows at most those
# modules to form one circle. Delete an entry once its circle is gone.
ALLOWED_CIRCLES = []


def module_graph():
    """``{module: {module: line}}`` of every project module, imports inside functions included.

    ``from package import name`` counts as importing ``package.name`` when that is a module,
    else ``package``; the implicit import of a parent package is not an edge (a package's
    ``__init__`` importing its own modules is not a circle).
    """
    paths = {}
    for package in ("asyncflow", "transports"):
        for path in sorted((ROOT / package).rglob("*.py")):
            paths[module_name(path)] = path
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(parts + ([node.module] if node.module else []))
                else:
                    source = node.module
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in paths
                           else source for alias in node.names]
            for target in targets:
                if target in paths and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def circles(graph):
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_circles_finds_a_circle_through_a_function_level_import():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert circles(graph) == [{"a", "b", "c"}]
    assert circles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_circles():
    graph = module_graph()
    problems = []
    for component in circles(graph):
        if any(component <= allowed for allowed in ALLOWED_CIRCLES):
            continue
        edges = [f"  {source} -> {target} (line {line})"
                 for source in sorted(component)
                 for target, line in sorted(graph[source].items()) if target in component]
        problems.append(f"{sorted(component)}:\n" + "\n".join(edges))
    assert not problems, ("import circles (break them: move what both sides need to a module "
                          "below both, or import only from the defining module):\n"
                          + "\n\n".join(problems))


def test_no_module_is_over_650_lines():
    # A module past this size holds more than one concern: split it along one.
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
             for package in ("asyncflow", "transports") for path in (ROOT / package).rglob("*.py")}
    assert sizes and not {path: n for path, n in sizes.items() if n > 650}
