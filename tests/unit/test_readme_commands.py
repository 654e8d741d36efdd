"""Every command the README and docs/ show still runs: the fenced shell blocks (```bash, ```sh,
```console) name only scripts that exist (recipes/, scripts/, benchmarks/, examples/), modules
that `python -m` can run (found with importlib's `find_spec`, a package by its `__main__`), and
Hydra keys that the composed training config has (the dotted `a.b.c=value` overrides of a recipe
or of `python -m verl_masopd.train`; `+`/`++` add keys and are not checked) or config-group
options that exist (`preset=NAME`)."""

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_masopd.config import compose_config

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^([ \t]*)```(bash|sh|console)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
SCRIPT = re.compile(r"(?:recipes|scripts|benchmarks|examples)/[\w./-]+\.(?:sh|py)")
OVERRIDE = re.compile(r"([A-Za-z_]\w*(?:\.\w+)+)=")
GROUP = re.compile(r"(preset)=(\w+)")
PYTHON = re.compile(r"python[\d.]*$")
CONFIG = ROOT / "verl_masopd" / "config"
TRAINING = re.compile(r"(?:^|/)recipes/[\w/.-]+\.sh$|^verl_masopd\.train$")
ABSENT = object()


def shell_commands(markdown: str) -> list[str]:
    """The commands of the fenced shell blocks, one line each with its spaces collapsed:
    continuation lines joined, a console block's `$ ` lines only."""
    commands = []
    for indent, kind, body in FENCE.findall(markdown):
        lines = [line[len(indent) :] if line.startswith(indent) else line for line in body.splitlines()]
        if kind == "console":
            lines = [line[2:] for line in lines if line.startswith("$ ")]
        commands += [" ".join(c.split()) for c in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines() if c.strip()]
    return commands


def runnable_module(name: str) -> bool:
    """`python -m name` finds something to run: a module, or a package with a `__main__`."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return False
    if spec is None:
        return False
    return spec.submodule_search_locations is None or importlib.util.find_spec(f"{name}.__main__") is not None


def has_key(cfg, key: str) -> bool:
    return OmegaConf.select(cfg, key, default=ABSENT, throw_on_missing=False) is not ABSENT


def problems(markdown: str, cfg) -> list[str]:
    """What the shell blocks of `markdown` name that does not exist, one line each."""
    found = []
    for command in shell_commands(markdown):
        words = shlex.split(command, comments=True)
        modules = [words[i + 1] for i in range(1, len(words) - 1) if words[i] == "-m" and PYTHON.search(words[i - 1])]
        found += [f"{command}: no module {m}" for m in modules if not runnable_module(m)]
        found += [f"{command}: no file {w}" for w in words if SCRIPT.fullmatch(w) and not (ROOT / w).is_file()]
        if not any(TRAINING.search(w) for w in words):
            continue
        for word in words:
            if (match := OVERRIDE.match(word)) and not has_key(cfg, match.group(1)):
                found.append(f"{command}: no key {match.group(1)} in the training config")
            if (match := GROUP.fullmatch(word)) and not (CONFIG / match[1] / f"{match[2]}.yaml").is_file():
                found.append(f"{command}: no config option {match[0]}")
    return found


@pytest.fixture(scope="module")
def cfg():
    return compose_config(["students.path=/models/student", "data.train_files=[/data/train.parquet]"])


def test_the_extractor_reads_indented_continued_and_console_blocks():
    text = (
        "1. a step\n\n   ```bash\n   bash recipes/masopd_code.sh \\\n       trainer.seed=1   # a comment\n   ```\n\n"
        "```console\n$ python -m verl_masopd.eval --help\nusage: ...\n```\n\n```python\nimport os\n```\n"
    )
    assert shell_commands(text) == [
        "bash recipes/masopd_code.sh trainer.seed=1 # a comment",
        "python -m verl_masopd.eval --help",
    ]


def test_a_missing_script_module_key_or_option_is_named(cfg):
    command = (
        "bash recipes/masopd_code.sh algorithm.masopd.no_such_key=1 algorithm.masopd.ras_coef=0 "
        "+algorithm.new.key=1 preset=no_such_preset preset=cpu"
    )
    text = (
        "```bash\nbash recipes/no_such_recipe.sh\npython benchmarks/step_time.py\n"
        f"python -m verl_masopd.no_such_module\npython -m verl_masopd.algos\n{command}\n```\n"
    )
    assert problems(text, cfg) == [
        "bash recipes/no_such_recipe.sh: no file recipes/no_such_recipe.sh",
        "python -m verl_masopd.no_such_module: no module verl_masopd.no_such_module",
        "python -m verl_masopd.algos: no module verl_masopd.algos",
        f"{command}: no key algorithm.masopd.no_such_key in the training config",
        f"{command}: no config option preset=no_such_preset",
    ]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_names_what_exists(document: Path, cfg):
    bad = problems(document.read_text(encoding="utf-8"), cfg)
    assert not bad, "\n".join(bad)


def test_the_documents_show_commands():
    """The check reads real blocks: the README's two commands among them."""
    commands = shell_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert commands[:2] == [
        "bash recipes/quickstart.sh # the main job on the embedded default (tiny offline models)",
        "bash scripts/test.sh # the whole test suite (CI runs exactly this)",
    ]
