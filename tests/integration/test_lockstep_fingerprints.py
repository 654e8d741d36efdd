"""The lockstep training result of every estimator stays put: the fingerprint of its update (32
seeded random projections of θ_after − θ_before per policy and MARFT's critic head, two steps of
the tiny CPU setup at the defaults: turn barrier on, max_off_policy 0; lockstep_fingerprints.py)
is within TOLERANCE of the committed reference, tests/integration/lockstep_fingerprints.json.

TOLERANCE, from measurement on one 2-core AMD EPYC (AVX2) machine (relative distance
‖f − f_ref‖ / ‖f_ref‖):
  kernel noise   the same runs with ATEN_CPU_CAPABILITY=default (torch's scalar kernels instead of
                 AVX2's): 9.2e-6 to 8.1e-5 over every part of every estimator (largest: masopd's
                 reasoner)
  behaviour      algorithm.masopd.ras_coef 0.25 → 0.2625 (5 %): 0.036 (reasoner), 0.040 (tool_user)
TOLERANCE = 1e-3 is 12 times the largest kernel noise and a 36th of that small behaviour change.

After a deliberate change of behaviour at the defaults, refresh the reference with
`VERL_PLATFORM=cpu python tests/integration/lockstep_fingerprints.py --record`.
"""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lockstep_fingerprints import CASES, REFERENCE, common_overrides, distance, fingerprint, train  # noqa: E402

pytestmark = pytest.mark.integration

TOLERANCE = 1e-3


@pytest.mark.parametrize("estimator", list(CASES))
def test_lockstep_update_matches_its_fingerprint(estimator, tiny_model_path, tiny_teacher_path, builtin_data, tmp_path):
    reference = json.loads(REFERENCE.read_text())[estimator]
    data = {domain: Path(path) for domain, path in builtin_data.items()}
    before, after = train(estimator, common_overrides(tiny_model_path, tiny_teacher_path), data, tmp_path)

    assert sorted(after) == sorted(reference)
    distances = {part: distance(fingerprint(before[part], after[part]), reference[part]) for part in after}
    assert max(distances.values()) <= TOLERANCE, distances
