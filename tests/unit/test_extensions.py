"""`imports` (training config) and `--import` (evaluation) load the files and modules that register
new workflows and estimators: each once, failures named with the key and the item."""

import subprocess
import sys
from pathlib import Path

import pytest

from verl_masopd.cli.extensions import import_extensions
from verl_masopd.config import compose_config
from verl_masopd.config.validate import validate_config
from verl_masopd.options.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_a_file_is_imported_once_and_a_module_by_name(tmp_path):
    marker = tmp_path / "ran"
    extension = tmp_path / "extension.py"
    extension.write_text(f"with open({str(marker)!r}, 'a') as f:\n    f.write('x')\n")
    import_extensions([str(extension)], "imports")
    import_extensions([str(extension), "json"], "imports")
    assert marker.read_text() == "x"


@pytest.mark.parametrize(
    "source,expected",
    [
        (None, "imports: cannot import '{path}': FileNotFoundError: no such file"),
        ("raise RuntimeError('broken')\n", "imports: cannot import '{path}': RuntimeError: broken"),
        ("def f(:\n", "imports: cannot import '{path}': SyntaxError"),
    ],
)
def test_a_missing_or_failing_file_is_named(tmp_path, source, expected):
    path = tmp_path / "extension.py"
    if source is not None:
        path.write_text(source)
    with pytest.raises(ValueError) as error:
        import_extensions([str(path)], "imports")
    assert str(error.value).startswith(expected.format(path=path))
    import_extensions([], "imports")


def test_a_missing_module_is_named():
    with pytest.raises(ValueError, match="--import: cannot import 'no_such_module_xyz': ModuleNotFoundError"):
        import_extensions(["no_such_module_xyz"], "--import")


def test_the_training_config_imports_before_it_checks_the_estimator():
    """In a fresh process (the registries are global): with the example imported, role_loo passes
    the estimator check and validation goes on to the next culprit, the missing student model."""
    check = (
        "import sys\n"
        "from verl_masopd.config import compose_config\n"
        "from verl_masopd.config.validate import validate_config\n"
        "cfg = compose_config(['preset=cpu', 'workflow.domain=math', 'students.path=/nonexistent',\n"
        "    'algorithm.adv_estimator=role_loo', 'data.train_files=[/x.parquet]', *sys.argv[1:]])\n"
        "try:\n"
        "    validate_config(cfg)\n"
        "except Exception as e:\n"
        "    print(e)\n"
    )
    run = [sys.executable, "-c", check]
    found = subprocess.run(run + ["imports=[examples/custom_estimator.py]"], cwd=ROOT, capture_output=True, text=True)
    assert found.stdout.startswith("students.path: no Hugging Face model at /nonexistent"), found.stderr[-2000:]
    unknown = subprocess.run(run, cwd=ROOT, capture_output=True, text=True)
    assert "role_loo" in unknown.stdout and "students.path" not in unknown.stdout, unknown.stderr[-2000:]


def test_a_bad_import_stops_the_run_with_a_config_error():
    cfg = compose_config(["preset=cpu", "students.path=/s", "imports=[/nonexistent/ext.py]"])
    with pytest.raises(ConfigError, match="imports: cannot import '/nonexistent/ext.py': FileNotFoundError"):
        validate_config(cfg)
