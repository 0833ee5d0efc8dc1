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
    "runtime": {"base", "graph", "ops", "kernels", "runtime"},
    "distributed": {"base", "graph", "ops", "kernels", "runtime", "distributed", "transports"},
    "session": {"base", "graph", "ops", "kernels", "runtime", "distributed", "session"},
    "top": {"base", "graph", "ops", "kernels", "runtime", "distributed", "session", "top",
            "transports"},
    "transports": {"transports"},
}
BASE = {"errors", "dtypes", "devices"}
FORBIDDEN_THIRD_PARTY = {
    "graph": {"trio", "aiohttp", "cupy"},
    "ops": {"trio", "aiohttp", "cupy"},
    "kernels": {"trio", "aiohttp", "cupy"},
    "runtime": {"aiohttp"},
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
    if head in ("graph", "ops", "kernels", "runtime", "distributed"):
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
