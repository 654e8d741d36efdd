"""`import verl` alone, in a fresh interpreter, registers the project's platform and algorithms.

verl swallows plugin import errors (logged at DEBUG), so only a fresh process shows whether the
`verl.plugins` entry point really works.
"""

import json
import os
import subprocess
import sys

REGISTRY_SNAPSHOT = (
    "import json, sys\n"
    "import verl\n"
    "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY\n"
    "before = (set(ADV_ESTIMATOR_REGISTRY), set(POLICY_LOSS_REGISTRY))\n"
    "import verl_masopd.algos\n"
    "print(json.dumps({'estimators': sorted(ADV_ESTIMATOR_REGISTRY), 'losses': sorted(POLICY_LOSS_REGISTRY),\n"
    "                  'new_estimators': sorted(set(ADV_ESTIMATOR_REGISTRY) - before[0]),\n"
    "                  'new_losses': sorted(set(POLICY_LOSS_REGISTRY) - before[1])}))\n"
)


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


def _snapshot(**env) -> dict:
    result = _run(REGISTRY_SNAPSHOT, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_verl_selects_cpu_platform_and_engine():
    code = (
        "import verl\n"
        "from verl.plugin.platform import get_platform\n"
        "from verl.workers.engine.base import EngineRegistry\n"
        "import verl.workers.engine_workers as workers\n"
        "platform = get_platform()\n"
        "print(type(platform).__name__, platform.device_name, platform.communication_backend_name(),\n"
        "      EngineRegistry.get_engine_cls('language_model', 'fsdp2').__name__,\n"
        "      workers.initialize_global_process_group_ray.__module__)\n"
    )
    result = _run(code, VERL_PLATFORM="cpu")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "PlatformCPU",
        "cpu",
        "gloo",
        "FSDPEngineWithLMHead",
        "verl_masopd.platform.engine_patches",
    ]


def test_cpu_platform_is_registered_but_never_auto_detected():
    code = (
        "import verl\n"
        "from verl.plugin.platform import PlatformRegistry\n"
        "from verl.plugin.platform.platform_manager import _detect_platform_name\n"
        "print('cpu' in PlatformRegistry.registered_names(), _detect_platform_name())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    registered, detected = result.stdout.split()
    assert registered == "True" and detected != "cpu"


def test_unknown_platform_name_stops_with_its_name():
    code = "import verl\nfrom verl.plugin.platform import get_platform\nget_platform()\n"
    result = _run(code, VERL_PLATFORM="tpu9000")
    assert result.returncode != 0
    assert "Unknown platform 'tpu9000'" in result.stderr
    assert "'cpu'" in result.stderr


def test_import_verl_registers_the_project_algorithms():
    """Names verl_masopd.algos adds to verl's registries are already there after a plain `import verl`."""
    direct = _snapshot(VERL_USE_EXTERNAL_PLUGINS="none")
    assert direct["new_estimators"], "verl_masopd.algos registers no advantage estimator"
    via_plugin = _snapshot()
    assert via_plugin["new_estimators"] == [] and via_plugin["new_losses"] == []
    assert set(direct["new_estimators"]) <= set(via_plugin["estimators"])
    assert set(direct["new_losses"]) <= set(via_plugin["losses"])
