"""A SHA-256 of every policy's parameters (and MARFT's critic head) after two training steps of
each estimator on the tiny CPU setup, fixed seeds: the same run before and after a refactoring
must give the same digests. Digests depend on the CPU's floating-point kernels (MKL's matrix
products, torch's vectorised random numbers and softmax), not on the thread count or the load:
compare runs of one machine (the results' machine_at_end names the processor and torch's CPU
capability), and rerun the "before" tree there rather than reading an earlier session's file.

The setup is the integration test's (tests/integration/test_trainer_estimators.py): the tiny
student and teacher, one built-in problem per step, G = 2, horizon 2, 24 response tokens, local
engines, and its scripted-mix backend (every other request answered correctly, so rewards vary).
The runs are tests/integration/lockstep_fingerprints.py's, whose CI test checks a kernel-robust
fingerprint of the same updates.
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
from lockstep_fingerprints import CASES, STEPS, builtin_data, common_overrides, train  # noqa: E402

from verl_masopd.tiny_world.models import cached_model  # noqa: E402


def digest(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 over the tensors' names and bytes, in sorted name order."""
    sha = hashlib.sha256()
    for name in sorted(state):
        sha.update(name.encode())
        sha.update(state[name].detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()


def checksums(estimator: str, common: list[str], data: dict[str, Path], work: Path) -> dict[str, str]:
    """{policy name (and "critic"): digest} after STEPS steps of `estimator`."""
    _, after = train(estimator, common, data, work)
    return {part: digest(state) for part, state in after.items()}


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
    data = builtin_data(work)
    common = [*common_overrides(student, teacher), *args.set]
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
