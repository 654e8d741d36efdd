"""Imports between the parts of verl_masopd run downwards only.

Every module under verl_masopd/ is parsed with `ast` (nothing is imported) and each
`import verl_masopd.X...` / `from verl_masopd.X... import ...`, top level or inside a function,
is an edge from the module's part to part X (a part: a subpackage, or a module directly in
verl_masopd/). A part may import itself and the parts of lower layers, never a part of its own
layer or of a higher one. The layers, bottom to top:

    1. shared modules   chat, cli_args, config_errors, defaults, extensions, file_digest, folder_install,
                        quiet_import, run_folder, tiny_models, token_layout
    2. foundations      platform (the CPU platform for verl's engine), retrieval, sandbox, verify,
                        models (known pretrained models, fetched and converted)
    3. workflows
    4. context          (the context layout and the one truncation rule)
    5. rollout          (episodes, generation backends, evaluation records and their summary)
    6. teacher, algos
    7. engine           (a policy on verl's training engine)
    8. serving          (verl's vLLM servers for the policies and the teacher)
    9. trainer, config, tiny_world
   10. eval
   11. report, train, plugin, merge_adapter
"""

import ast
from pathlib import Path

import verl_masopd

LAYERS = [
    {
        "chat",
        "cli_args",
        "config_errors",
        "defaults",
        "extensions",
        "file_digest",
        "folder_install",
        "quiet_import",
        "run_folder",
        "tiny_models",
        "token_layout",
    },
    {"platform", "retrieval", "sandbox", "verify", "models"},
    {"workflows"},
    {"context"},
    {"rollout"},
    {"teacher", "algos"},
    {"engine"},
    {"serving"},
    {"trainer", "config", "tiny_world"},
    {"eval"},
    {"report", "train", "plugin", "merge_adapter"},
]
LAYER_OF = {part: level for level, parts in enumerate(LAYERS) for part in parts}
PACKAGE = Path(verl_masopd.__file__).parent


def part_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE).parts
    return relative[0] if len(relative) > 1 else Path(relative[0]).stem


def imported_parts(tree: ast.AST) -> set[str]:
    """The parts a module imports at run time; an import under `if TYPE_CHECKING:` names a type for
    annotations only (the serving plans annotate with the trainer's typed config sections) and is no
    edge."""
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    names = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return {name.split(".")[1] for name in names if name.startswith("verl_masopd.")}


def modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if part_of(path) != "__init__")


def test_every_part_has_a_layer():
    unplaced = {part_of(path) for path in modules()} - set(LAYER_OF)
    assert not unplaced, f"parts of verl_masopd without a layer in LAYERS: {sorted(unplaced)}"


def test_imports_run_downwards():
    upward = []
    for path in modules():
        source = part_of(path)
        for target in imported_parts(ast.parse(path.read_text(), filename=str(path))) - {source}:
            if LAYER_OF.get(target, -1) >= LAYER_OF[source]:
                upward.append(f"{path.relative_to(PACKAGE.parent)} ({source}) imports {target}")
    assert not upward, "imports that run up or across the layers:\n" + "\n".join(sorted(upward))
