"""Fingerprints of the lockstep training update of every estimator, robust to the CPU's kernels.

The setup is benchmarks/parameter_checksums.py's (the estimator test's tiny CPU runs: one built-in
problem per step, G = 2, horizon 2, 24 response tokens, local engines, the scripted-mix backend,
seed 0) at the asynchronous pipeline's defaults (turn barrier on, max_off_policy 0). For each
policy p (and MARFT's critic head) with parameter change Δ_p = θ_after − θ_before over STEPS steps,
flattened in sorted parameter-name order (n_p numbers),

    f_p = P_p Δ_p / √n_p,   P_p ∈ R^{M × n_p} with i.i.d. N(0, 1) entries drawn from SEED,

M = 32 fixed random projections: E‖f_p‖² = M ‖Δ_p‖² / n_p, and a change δ of the update moves f_p
by about ‖δ‖ √(M / n_p) in every direction, so the relative distance ‖f_p − f_p^ref‖ / ‖f_p^ref‖
follows the update's own relative change (Johnson–Lindenstrauss). Kernel noise (another vector
width, another summation order) moves the update by rounding only; a behaviour change moves it
by orders of magnitude more (tests/integration/test_lockstep_fingerprints.py's measured numbers).

Refresh the committed reference after a deliberate change of behaviour at the defaults:

    VERL_PLATFORM=cpu python tests/integration/lockstep_fingerprints.py --record

which writes tests/integration/lockstep_fingerprints.json; without --record it prints each
estimator's relative distance to that reference (--set adds Hydra overrides, e.g. to measure the
distance a behaviour change makes; --only picks estimators).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from data_prep.schema import read_problems  # noqa: E402
from verl_masopd.config import compose_config  # noqa: E402
from verl_masopd.config.validate import validate_config  # noqa: E402
from verl_masopd.trainer.loop import Trainer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ScriptedMixBackend  # noqa: E402

REFERENCE = Path(__file__).with_suffix(".json")
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
PROJECTIONS = 32
SEED = 20240611


def common_overrides(student: str, teacher: str) -> list[str]:
    """The tiny CPU setup shared by every case (the estimator test's sizes, no checkpoints)."""
    return [
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
    ]


def builtin_data(folder: Path) -> dict[str, Path]:
    """{domain: parquet} of the 8 built-in problems of each domain, written into `folder`."""
    data = {}
    for domain in ("math", "code"):
        data[domain] = folder / f"{domain}.parquet"
        command = [sys.executable, "-m", "data_prep", "builtin", "--domain", domain, "--output", str(data[domain])]
        subprocess.run([*command, "--n", "8"], check=True, capture_output=True)
    return data


def train(
    estimator: str, common: list[str], data: dict[str, Path], work: Path
) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, dict[str, torch.Tensor]]]:
    """({part: state} before, {part: state} after) STEPS steps of `estimator`; a part is a policy's
    name, or "critic" for MARFT's value head."""
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

    def states() -> dict[str, dict[str, torch.Tensor]]:
        out = {name: policy.engine.hf_state_dict() for name, policy in trainer.policies.items()}
        if trainer.critic is not None:
            out["critic"] = {k: v.detach().clone() for k, v in trainer.critic.head.state_dict().items()}
        return out

    before = states()
    try:
        for _ in range(STEPS):
            trainer.train_step()
    finally:
        trainer.close()
    return before, states()


def fingerprint(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> list[float]:
    """f = P Δ / √n (module docstring): P's rows drawn tensor by tensor in sorted name order."""
    generator = torch.Generator().manual_seed(SEED)
    total = torch.zeros(PROJECTIONS, dtype=torch.float64)
    n = 0
    for name in sorted(after):
        delta = (after[name].double() - before[name].double()).flatten()
        total += torch.randn(PROJECTIONS, delta.numel(), generator=generator, dtype=torch.float64) @ delta
        n += delta.numel()
    return (total / n**0.5).tolist()


def fingerprints(estimators: list[str], student: str, teacher: str, overrides: list[str]) -> dict:
    """{estimator: {part: fingerprint}} of the lockstep runs."""
    work = Path(tempfile.mkdtemp(prefix="fingerprints-"))
    data = builtin_data(work)
    common = [*common_overrides(student, teacher), *overrides]
    out = {}
    for estimator in estimators:
        before, after = train(estimator, common, data, work)
        out[estimator] = {part: fingerprint(before[part], after[part]) for part in after}
    return out


def distance(actual: list[float], expected: list[float]) -> float:
    """‖actual − expected‖ / ‖expected‖."""
    a, e = torch.tensor(actual, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64)
    return float((a - e).norm() / e.norm())


def main() -> None:
    from verl_masopd.tiny_world.models import cached_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help=f"write the reference ({REFERENCE.name})")
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), help="estimators to compare (default: all)")
    parser.add_argument("--set", nargs="*", default=[], help="Hydra overrides added to every run")
    args = parser.parse_args()
    if args.record and (args.only or args.set):
        parser.error("--record writes every estimator's reference at the defaults: no --only, no --set")
    models = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verl_masopd" / "tiny"
    student, teacher = cached_model(models, size="tiny", seed=0), cached_model(models, size="small", seed=1)
    found = fingerprints(args.only or list(CASES), student, teacher, args.set)
    if args.record:
        REFERENCE.write_text(json.dumps(found, indent=1) + "\n")
        return
    reference = json.loads(REFERENCE.read_text())
    report = {e: {p: distance(f, reference[e][p]) for p, f in parts.items()} for e, parts in found.items()}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
