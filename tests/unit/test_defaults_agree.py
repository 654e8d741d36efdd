"""Every default has one value: the typed sections the project reads its config into, the
evaluation CLI and docs/method.md agree with the composed training config
(verl_masopd/config/masopd_trainer.yaml over verl's ppo_trainer, no preset).

The typed sections are found, not listed: every estimator options class (`OPTION_SECTIONS`, read
from `algorithm.<section>`), every section of the trainer's `RunConfig` (read from the config
section of the same name, nested dataclasses from their sub-section), and the distillation
settings. A field with a default must have the config's value; a field without one is filled
from the config. docs/method.md names a default as a key followed by its value in parentheses
(`` `key` (value `` or `` `key` β (value ``, a unit may follow), `` `key=value` (default) ``,
`` `key`: `value` (default ``, `` `key`, default value ``, `` `key...` (default value) ``, or a row
`` | `key` | value | `` of its defaults table; every such value must be the config's, and for a
`workflow.options` key (which the config leaves empty) the keyword default of the workflows the
section describes (the search system's section: the search workflow; else the two-role ones)."""

import dataclasses
import inspect
import re
import typing
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from verl_masopd.algos.distillation import SECTION as DISTILLATION
from verl_masopd.algos.distillation import DistillationSettings
from verl_masopd.algos.masopd import MasopdOptions
from verl_masopd.algos.specs import OPTION_SECTIONS
from verl_masopd.config import compose_config
from verl_masopd.config.run import RunConfig
from verl_masopd.eval.__main__ import VALIDATION_SAMPLING, build_parser
from verl_masopd.eval.run_config import DEFAULTS, RUN_KEYS
from verl_masopd.workflows import workflow_class

ROOT = Path(__file__).resolve().parents[2]
METHOD = ROOT / "docs" / "method.md"
ABSENT = object()
OPTIONS = "workflow.options."
TWO_ROLE = (("mas", "code"), ("mas", "math"))
SEARCH = (("search", "qa"),)
SEARCH_SECTION = "The hierarchical search system"
SECTIONS = set(OmegaConf.load(ROOT / "verl_masopd" / "config" / "masopd_trainer.yaml"))
# DistillationSettings' names of the section's keys
DISTILLATION_KEYS = {"coef": "distillation_loss_coef"}
# verl's keys that the project does not set: None in DistillationSettings means "not used by the
# mode" (k1 reads no top-k and clamps nothing), whatever verl's config composes
DISTILLATION_UNSET = {"topk", "log_prob_min_clamp"}
NUMBER = re.compile(r"-?\d[\d.]*(?:e[+-]?\d+)?")
KEY = r"`([a-z_]\w*(?:\.\w+)+)"
LITERAL = r"(`[\w{}\[\]-]+`|-?\d[\d.e+-]*|true|false|null)"
MENTIONS = (
    re.compile(KEY + r"(?:=[^`]*)?`\s*\(default " + LITERAL + r"\)"),  # `key` (default value)
    re.compile(KEY + r"=([^`]+)`\s*(?:\(default\)|, default)"),  # `key=value` (default)
    re.compile(KEY + r"`:\s*" + LITERAL + r"\s*\(default"),  # `key`: `value` (default
    re.compile(KEY + r"`,\s*default\s+" + LITERAL + r"(?=[),;]|\s)"),  # `key`, default value
    re.compile(KEY + r"`\s*(?:[^\s`()]{1,8}\s*)?\(" + LITERAL + r"(?=[),;]| [a-z])"),  # `key` β (value
    re.compile(r"^\|\s*" + KEY + r"`\s*\|\s*" + LITERAL + r"\s*\|\s*$", re.MULTILINE),  # | `key` | value |
)


@pytest.fixture(scope="module")
def cfg():
    return compose_config(["students.path=/models/student", "data.train_files=[/data/train.parquet]"])


def config_value(cfg, key: str):
    value = OmegaConf.select(cfg, key, default=ABSENT, throw_on_missing=False)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def same(a, b) -> bool:
    """Equal values, numbers compared as numbers (1 and 1.0, 1e-5 and 0.00001)."""
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return a == b


def typed_sections() -> list[tuple[type, str, dict[str, str], set[str]]]:
    """(dataclass, config section, field -> key renames, fields not compared) of every typed section;
    RunConfig's sections named as the config's (the others, e.g. its sampling, are built from them)."""
    found = [(cls, f"algorithm.{section}", {}, set()) for section, cls in OPTION_SECTIONS.items()]
    found.append((DistillationSettings, DISTILLATION, DISTILLATION_KEYS, DISTILLATION_UNSET))

    def walk(cls: type, section: str) -> None:
        found.append((cls, section, {}, set()))
        for name, hint in typing.get_type_hints(cls).items():
            if dataclasses.is_dataclass(hint):
                walk(hint, f"{section}.{name}")

    for name, hint in typing.get_type_hints(RunConfig).items():
        if dataclasses.is_dataclass(hint) and name in SECTIONS:
            walk(hint, name)
    return found


def disagreements(cfg, sections) -> list[str]:
    bad = []
    for cls, section, renames, unset in sections:
        for field in dataclasses.fields(cls):
            key = f"{section}.{renames.get(field.name, field.name)}"
            value = config_value(cfg, key)
            if value is ABSENT:
                bad.append(f"{cls.__name__}.{field.name}: {key} is not in the config")
            elif field.name in unset:
                continue
            elif field.default is not dataclasses.MISSING and not same(field.default, value):
                bad.append(f"{cls.__name__}.{field.name} = {field.default!r}, {key} = {value!r}")
            elif field.default_factory is not dataclasses.MISSING and not same(field.default_factory(), value):
                bad.append(f"{cls.__name__}.{field.name} = {field.default_factory()!r}, {key} = {value!r}")
    return bad


def named_defaults(text: str) -> list[tuple[str, str]]:
    """(key, value as written) for every default the text names (module doc)."""
    return [(key, value) for pattern in MENTIONS for key, value in pattern.findall(text)]


def workflow_option_defaults(name: str, workflows) -> list:
    """The default of keyword option `name` in each of `workflows` whose initialisers take it."""
    found = []
    for workflow in workflows:
        for klass in workflow_class(*workflow).__mro__:
            init = klass.__dict__.get("__init__")
            parameter = inspect.signature(init).parameters.get(name) if init is not None else None
            if parameter is not None and parameter.default is not inspect.Parameter.empty:
                found.append(parameter.default)
                break
    return found


def literal(written: str):
    """The value a document writes: a number (1e-5 included), true / false / null, else the text."""
    text = written.strip("`")
    return float(text) if NUMBER.fullmatch(text) else yaml.safe_load(text)


def test_the_typed_sections_are_found():
    names = {cls.__name__ for cls, *_ in typed_sections()}
    assert {"MasopdOptions", "MarftOptions", "RewardWeights", "DistillationSettings", "WorkflowSection"} <= names
    assert {"ExecTimeouts", "TeacherSection", "EnginesSection", "TrainerSection"} <= names


def test_every_dataclass_default_is_the_configs(cfg):
    bad = disagreements(cfg, typed_sections())
    assert not bad, "\n".join(bad)


def test_a_drifted_default_is_caught(cfg):
    """The check fails on the drift it exists for: an options class whose default is not the yaml's."""

    @dataclasses.dataclass(frozen=True)
    class OldMasopdOptions:
        ras_coef: float = 1.0
        ras_clip: float = 5.0
        renamed: int = 1

    assert disagreements(cfg, [(OldMasopdOptions, "algorithm.masopd", {}, set())]) == [
        "OldMasopdOptions.ras_coef = 1.0, algorithm.masopd.ras_coef = 0.25",
        "OldMasopdOptions.renamed: algorithm.masopd.renamed is not in the config",
    ]


def test_the_options_built_from_python_are_the_trainers(cfg):
    assert MasopdOptions() == MasopdOptions(**config_value(cfg, "algorithm.masopd"))


def test_the_evaluation_defaults_are_the_configs(cfg):
    bad = [
        f"{arg}: {DEFAULTS[arg]!r}, {key} = {config_value(cfg, key)!r}"
        for arg, key in RUN_KEYS.items()
        if not same(DEFAULTS[arg], config_value(cfg, key))
    ]
    args = build_parser().parse_args(["--data", "d.parquet", "--out", "o"])
    flags = {
        "temperature": f"{VALIDATION_SAMPLING}.temperature",
        "top_p": f"{VALIDATION_SAMPLING}.top_p",
        "top_k": f"{VALIDATION_SAMPLING}.top_k",
        "teacher_max_context": "teacher.max_context_length",
    }
    bad += [
        f"--{arg}: {getattr(args, arg)!r}, {key} = {config_value(cfg, key)!r}"
        for arg, key in flags.items()
        if not same(getattr(args, arg), config_value(cfg, key))
    ]
    assert not bad, "\n".join(bad)


def test_the_mention_patterns_read_the_documents_forms():
    text = (
        "- **Keys.** `algorithm.masopd.ras_coef` β (1.0; 0 turns RAS off), `workflow.exec_timeout_s.code` (30 s),\n"
        "`pac.reveal_reference=true` (default false), `pac.attribution=rules`, default: verdicts;\n"
        "`workflow.prompt_style`: `paper` (default), `algorithm.grpo.group_by` (`problem` \\| `problem_role`)\n"
        "| `algorithm.marft.lam` | 0.95 |\n"
        "decimals within `workflow.options.float_tol`, default 1e-6). On a mismatch\n"
    )
    assert sorted(named_defaults(text)) == [
        ("algorithm.marft.lam", "0.95"),
        ("algorithm.masopd.ras_coef", "1.0"),
        ("pac.attribution", "rules"),
        ("pac.reveal_reference", "false"),
        ("workflow.exec_timeout_s.code", "30"),
        ("workflow.options.float_tol", "1e-6"),
        ("workflow.prompt_style", "`paper`"),
    ]


def test_the_values_method_md_names_are_the_configs(cfg):
    text = METHOD.read_text(encoding="utf-8")
    assert ("algorithm.masopd.ras_coef", "0.25") in named_defaults(text)
    bad = []
    for section in re.split(r"^## ", text, flags=re.MULTILINE):
        # a workflow's own options (workflow.options is empty): the keyword defaults of the
        # workflows the section describes
        workflows = SEARCH if section.startswith(SEARCH_SECTION) else TWO_ROLE
        for key, written in named_defaults(section):
            if key.startswith(OPTIONS):
                defaults = workflow_option_defaults(key.removeprefix(OPTIONS), workflows)
                if not defaults or any(not same(literal(written), d) for d in defaults):
                    bad.append(f"docs/method.md: {key} = {written}, the workflows' defaults are {defaults}")
                continue
            value = config_value(cfg, key)
            if value is ABSENT:
                bad.append(f"docs/method.md names {key}, which the config lacks")
            elif not same(literal(written), value):
                bad.append(f"docs/method.md: {key} = {written}, the config has {value!r}")
    assert not bad, "\n".join(bad)
