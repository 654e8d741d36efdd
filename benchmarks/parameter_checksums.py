"""A SHA-256 of every policy's parameters (and MARFT's critic head) after two training steps of
each estimator on the tiny CPU setup, fixed seeds: the same run before and after a refactoring
must give the same digests. Digests depend on the CPU's floating-point kernels (MKL's matrix
products, torch's vectorised random numbers and softmax), not on the thread count or the load:
compare runs of one machine (the results' machine_at_end names the processor and torch's CPU
capability), and rerun the "before" tree there rather than reading an earlier session's file.

The setup is the integration test's (tests/integration/test_trainer_estimators.py): the tiny
student and teacher, one built-in problem per step, G = 2, horizon 2, 24 response tokens, local
engines, and its scripted-mix backend (every other request answered correctly, so rewards vary).
Writes benchmarks/results/<name>.json. --student/--teacher pin the models, so that trees whose
tiny-model builder differs (another tokenizer) are compared on the same weights. --set adds Hydra
overrides to every run, so that a tree whose defaults changed is compared at the earlier values
(e.g. --set algorithm.masopd.ras_coef=1.0).

    VERL_PLATFORM=cpu python benchmarks/parameter_checksums.py [--name parameter_checksums] [--only grpo ...]
        [--student DIR --teacher DIR] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from results_file import save_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from conftest import ScriptedMixBackend  # noqa: E402

from data_prep.schema import read_problems  # noqa: E402
from verl_masopd.config import compose_config  # noqa: E402
from verl_masopd.tiny_models import cached_model  # noqa: E402
from verl_masopd.trainer.config import validate_config  # noqa: E402
from verl_masopd.trainer.loop import Trainer  # noqa: E402

CASES = {
    "masopd": ("math", ()),
    "opd": ("code", ()),
    "grpo": ("math", ()),
    "magrpo": ("math", ()),
    "marft": ("math", ()),
    "cure": ("code", ("workflow.policy_sharing=shared", "workflow.horizon=1")),
    "at_grpo": ("code", ("rollout.tree_sampling=true",)),
}
STEPS = 2


def digest(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 over the tensors' names and bytes, in sorted name order."""
    sha = hashlib.sha256()
    for name in sorted(state):
        sha.update(name.encode())
        sha.update(state[name].detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()


def checksums(estimator: str, common: list[str], data: dict[str, Path], work: Path) -> dict[str, str]:
    """{policy name (and "critic"): digest} after STEPS steps of `estimator`."""
    domain, extra = CASES[estimator]
    problems = read_problems(str(data[domain]))
    cfg = compose_config(
        [
            *common,
            f"workflow.domain={domain}",
            f"data.train_files=[{data[domain]}]",
            f"algorithm.adv_estimator={estimator}",
            f"trainer.default_local_dir={work / estimator}",
            *extra,
        ]
    )
    trainer = Trainer(
        validate_config(cfg), backend_factory=lambda p, path, seed: ScriptedMixBackend(path, seed, problems, domain)
    )
    try:
        for _ in range(STEPS):
            trainer.train_step()
    finally:
        trainer.close()
    out = {name: digest(policy.engine.hf_state_dict()) for name, policy in trainer.policies.items()}
    if trainer.critic is not None:
        out["critic"] = digest(trainer.critic.head.state_dict())
    return out


def folder_digest(folder: str) -> str:
    """SHA-256 of the model's safetensors files, in name order."""
    sha = hashlib.sha256()
    for path in sorted(Path(folder).glob("*.safetensors")):
        sha.update(path.read_bytes())
    return sha.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="parameter_checksums", help="results file name")
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), help="estimators to run (default: all)")
    parser.add_argument("--student", help="student model folder (default: the tiny model this tree builds)")
    parser.add_argument("--teacher", help="teacher model folder (default: the small model this tree builds)")
    parser.add_argument("--set", nargs="*", default=[], help="Hydra overrides added to every run")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="checksums-"))
    models = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verl_masopd" / "tiny"
    student = args.student or cached_model(models, size="tiny", seed=0)
    teacher = args.teacher or cached_model(models, size="small", seed=1)
    data = {}
    for domain in ("math", "code"):
        data[domain] = work / f"{domain}.parquet"
        command = [sys.executable, "-m", "data_prep", "builtin", "--domain", domain, "--output", str(data[domain])]
        subprocess.run([*command, "--n", "8"], check=True, capture_output=True)
    common = [
        "preset=cpu",
        "engines.placement=local",
        f"students.path={student}",
        f"teacher.model_path={teacher}",
        "data.train_batch_size=1",
        "data.max_response_length=24",
        "rollout.group_size=2",
        "workflow.horizon=2",
        f"trainer.total_training_steps={STEPS}",
        "trainer.logger=[console]",
        "trainer.save_freq=-1",
        *args.set,
    ]
    estimators = args.only or list(CASES)
    report = {
        "steps": STEPS,
        "setup": "tests/integration/test_trainer_estimators.py's overrides, scripted-mix backend, seed 0",
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "models": {"student": student, "teacher": teacher},
        # the weights themselves: a model folder of the same path holds other weights on another CPU
        "model_digests": {"student": folder_digest(student), "teacher": folder_digest(teacher)},
        "overrides": args.set,
        "checksums": {e: checksums(e, common, data, work) for e in estimators},
    }
    save_result(args.name, report)


if __name__ == "__main__":
    main()
