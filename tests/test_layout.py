"""The package's layout (CONTRIBUTING.md): folders a newcomer can read by name, no import circles, no upward imports.

The import graph is read from the source (`ast`), imports inside functions included: an import on demand is still a
dependency."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "rlhf"
MAX_MODULES = 16  # per folder, __init__.py included
LIFECYCLE = "rlhf.lifecycle."


def module_name(path, package=PACKAGE):
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path, name, modules):
    """The `modules` that `path` (module `name`) imports, the packages above each included (Python runs their
    __init__.py)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).rstrip(".")
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from rlhf.x import module`
    deps = set()
    for each in found:
        parts = each.split(".")
        deps.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules)
    return deps - {name}


def import_graph(package=PACKAGE):
    paths = {module_name(path, package): path for path in package.rglob("*.py")}
    return {name: imported_modules(path, name, paths) for name, path in paths.items()}


def cycles(graph):
    """The import circles of `graph`: its strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph[node]:
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = set()
            while not component or node not in component:
                component.add(stack.pop())
            on_stack.difference_update(component)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_the_cycle_check_finds_a_circle_through_a_packages_init(tmp_path):
    """The check itself: a circle made only by a package's __init__.py re-exporting a module is found."""
    package = tmp_path / "rlhf"
    (package / "lifecycle").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text("def f():\n    from rlhf.lifecycle import checkpoints\n")
    (package / "lifecycle" / "__init__.py").write_text("from rlhf.lifecycle.run import start_run\n")
    (package / "lifecycle" / "checkpoints.py").write_text("")
    (package / "lifecycle" / "run.py").write_text("from rlhf import data\n")
    assert cycles(import_graph(package)) == [["rlhf.data", "rlhf.lifecycle", "rlhf.lifecycle.run"]]


def test_no_folder_holds_more_than_16_modules():
    crowded = {str(folder.relative_to(PACKAGE.parent)): count for folder in [PACKAGE, *PACKAGE.rglob("*")]
               if folder.is_dir() and (count := len(list(folder.glob("*.py")))) > MAX_MODULES}
    assert crowded == {}, f"split these folders into parts named for what they hold: {crowded}"


def lifecycle_allowed(module, lifecycle):
    """What `module` may import from rlhf/lifecycle/ (`lifecycle`: its modules)."""
    if module == LIFECYCLE + "run":
        return lifecycle
    if module.startswith(LIFECYCLE):  # the pieces the run drives
        return lifecycle - {LIFECYCLE + "run", LIFECYCLE + "guard"}
    if module == "rlhf.cli":  # its exit paths release the lock and restore the signals
        return {LIFECYCLE + "checkpoints", LIFECYCLE + "lock", LIFECYCLE + "signals"}
    return {LIFECYCLE + "checkpoints"}  # the format of a checkpoint, which a trainer writes


def test_the_lower_layers_never_import_a_runs_lifecycle():
    """Data, models, rewards, evaluation and PPO take from rlhf/lifecycle/ only the checkpoints' format; the run is
    imported by the scripts alone, and the pieces it drives never import it or its guard."""
    graph = import_graph()
    lifecycle = {module for module in graph if module.startswith(LIFECYCLE)}
    upward = {module: sorted(deps & lifecycle - lifecycle_allowed(module, lifecycle))
              for module, deps in graph.items() if deps & lifecycle - lifecycle_allowed(module, lifecycle)}
    assert upward == {}, f"these import the run's lifecycle from below it: {upward}"


COMPAT = "rlhf.trl_compat"


def test_the_compat_layer_takes_nothing_from_the_package_above_it_but_its_leaves():
    """rlhf/trl_compat/ is the floor under the package (scripts -> rlhf/ -> compat -> TRL): it may use a module of the
    package only where that module imports no other (`errors`, the KL controller's maths), never rewards, data or a
    run's life."""
    graph = import_graph()
    leaves = {module for module, deps in graph.items() if not deps}
    upward = {module: sorted(dep for dep in deps if not dep.startswith(COMPAT) and dep not in leaves)
              for module, deps in graph.items() if module.startswith(COMPAT)}
    assert {module: deps for module, deps in upward.items() if deps} == {}, (
        "these compat modules import the package above them")
