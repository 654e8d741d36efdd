"""Imports between the parts of verl_masopd run downwards only, and no module imports itself
through others.

Every module under verl_masopd/ is parsed with `ast` (nothing is imported) and each import
statement naming verl_masopd (`import verl_masopd.X...` / `from verl_masopd.X... import ...`), top
level, inside a function or under `if TYPE_CHECKING:`, is an edge from the module's part to part X
(a part: a subpackage, or a module directly in verl_masopd/). A part may import itself and the
parts of lower layers, never a part of its own layer or of a higher one. The layers, bottom to top:

    1. shared           cli (the entry points' argument types, quiet verl import, extensions,
                        the Hydra run folder), files (digests, one-rename installs), options (the
                        config error and the packaged defaults)
    2. foundations      platform (the CPU platform for verl's engine), retrieval, sandbox, verify
    3. workflows
    4. tokens           (the chat encoding, the context layout and its truncation rule, the
                        batch token layout)
    5. rollout, models  (episodes, generation backends, evaluation records; known pretrained
                        models, fetched and converted)
    6. teacher, algos
    7. engine           (a policy on verl's training engine)
    8. config           (the run config: its sections, `RunConfig` and their validation)
    9. serving          (verl's vLLM servers for the policies and the teacher)
   10. trainer, tiny_world
   11. eval
   12. report, train, plugin, merge_adapter

The package root holds the entry points only (train, plugin, merge_adapter): every other module
lives in the subpackage named for its job.

Between modules, the same edges (to the module an import names: `from verl_masopd.a import b`
names verl_masopd.a.b where that is a module, else verl_masopd.a) form no cycle.
"""

import ast
from pathlib import Path

import verl_masopd

LAYERS = [
    {"cli", "files", "options"},
    {"platform", "retrieval", "sandbox", "verify"},
    {"workflows"},
    {"tokens"},
    {"rollout", "models"},
    {"teacher", "algos"},
    {"engine"},
    {"config"},
    {"serving"},
    {"trainer", "tiny_world"},
    {"eval"},
    {"report", "train", "plugin", "merge_adapter"},
]
ENTRY_POINTS = {"train", "plugin", "merge_adapter"}
LAYER_OF = {part: level for level, parts in enumerate(LAYERS) for part in parts}
PACKAGE = Path(verl_masopd.__file__).parent


def part_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE).parts
    return relative[0] if len(relative) > 1 else Path(relative[0]).stem


def imported_modules(tree: ast.AST) -> set[str]:
    """The verl_masopd modules (and packages) a module's import statements name, every statement
    counted: top level, in a function, under `if TYPE_CHECKING:`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative imports are not used in verl_masopd"
            submodules = {f"{node.module}.{alias.name}" for alias in node.names}
            names |= {name for name in submodules if module_file(name) is not None} or {node.module}
    return {name for name in names if name.split(".")[0] == "verl_masopd"}


def imported_parts(tree: ast.AST) -> set[str]:
    return {name.split(".")[1] for name in imported_modules(tree) if "." in name}


def module_file(name: str) -> Path | None:
    """The file of module or package `name` under verl_masopd/, None for a name inside a module."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if part_of(path) != "__init__")


def test_every_part_has_a_layer():
    unplaced = {part_of(path) for path in modules()} - set(LAYER_OF)
    assert not unplaced, f"parts of verl_masopd without a layer in LAYERS: {sorted(unplaced)}"


def test_the_package_root_holds_entry_points_only():
    loose = {path.stem for path in PACKAGE.glob("*.py")} - ENTRY_POINTS - {"__init__"}
    assert not loose, f"modules in verl_masopd/ that are not entry points: {sorted(loose)}"


def test_imports_run_downwards():
    upward = []
    for path in modules():
        source = part_of(path)
        for target in imported_parts(ast.parse(path.read_text(), filename=str(path))) - {source}:
            if LAYER_OF.get(target, -1) >= LAYER_OF[source]:
                upward.append(f"{path.relative_to(PACKAGE.parent)} ({source}) imports {target}")
    assert not upward, "imports that run up or across the layers:\n" + "\n".join(sorted(upward))


def test_no_module_imports_itself_through_others():
    """Depth-first over the module graph; a module met again on the current path closes a cycle."""
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        graph[module] = imported_modules(ast.parse(path.read_text(), filename=str(path))) - {module}
    cycles, done = [], set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycles.append(" -> ".join(path[path.index(module) :] + [module]))
            return
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
