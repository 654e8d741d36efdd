"""The tiny world's weights: pretraining is deterministic, a build is renamed into place whole,
and shipped weights are checked against their manifest and builder (a mismatch names the file and
the rebuild command)."""

import json

import pytest
import torch

from verl_masopd.files.install import install
from verl_masopd.tiny_world import world
from verl_masopd.tiny_world.builder import recipe
from verl_masopd.tiny_world.demos import MathDemonstrations
from verl_masopd.tiny_world.pretrain import Schedule, pretrain
from verl_masopd.tiny_world.pretrain_state import STATE, load_state, save_state
from verl_masopd.tiny_world.weights import MANIFEST, WEIGHTS, WeightsError, verified_models, write_manifest

REBUILD = "python -m verl_masopd.tiny_world build --domain math"


def _run(tokenizer, seed: int) -> dict[str, dict]:
    saved = {}
    schedule = Schedule(steps=3, student_steps=2, role_confusion=0.5, batch_size=2, warmup=1)
    draws = MathDemonstrations(tokenizer).draw, MathDemonstrations(tokenizer, 0.5).draw

    def keep(name, model, _step):
        saved[name] = {k: v.clone() for k, v in model.state_dict().items()}

    losses = pretrain(tokenizer, *draws, schedule, seed, keep)
    return saved, losses


def test_pretraining_is_deterministic_and_the_student_continues_from_the_teacher(tiny_tokenizer):
    first, losses = _run(tiny_tokenizer, 0)
    again, losses_again = _run(tiny_tokenizer, 0)
    assert losses == losses_again and len(losses) == 5
    for name in ("student", "teacher"):
        assert all(torch.equal(first[name][k], again[name][k]) for k in first[name])
    assert any(not torch.equal(first["student"][k], first["teacher"][k]) for k in first["teacher"])


class _Killed(Exception):
    pass


def test_a_build_resumed_from_its_state_has_the_weights_of_one_never_stopped(tiny_tokenizer, tmp_path):
    schedule = Schedule(steps=24, student_steps=2, role_confusion=0.5, batch_size=2, warmup=1)
    draws = MathDemonstrations(tiny_tokenizer).draw, MathDemonstrations(tiny_tokenizer, 0.5).draw

    def keeper(saved):
        return lambda name, model, _step: saved.update({name: {k: v.clone() for k, v in model.state_dict().items()}})

    whole = {}
    whole_losses = pretrain(tiny_tokenizer, *draws, schedule, 0, keeper(whole))

    def killed_after_step_16(state):
        save_state(tmp_path, {**state, "builder": "b1"})
        if state["step"] == 16:
            raise _Killed

    with pytest.raises(_Killed):
        pretrain(tiny_tokenizer, *draws, schedule, 0, keeper({}), on_state=killed_after_step_16, state_every=8)
    state = load_state(tmp_path, "b1")
    assert state["step"] == 16 and len(state["losses"]) == 16
    resumed = {}
    resumed_losses = pretrain(tiny_tokenizer, *draws, schedule, 0, keeper(resumed), resume=state)
    assert resumed_losses == whole_losses and len(whole_losses) == 26
    for name in ("student", "teacher"):
        assert all(torch.equal(whole[name][k], resumed[name][k]) for k in whole[name])

    with pytest.raises(WeightsError, match="a build state of builder b1, but this code's builder is b2"):
        load_state(tmp_path, "b2")
    (tmp_path / STATE).write_bytes(b"not a state")
    with pytest.raises(WeightsError, match=f"{tmp_path / STATE}: unreadable build state"):
        load_state(tmp_path, "b1")
    assert load_state(tmp_path / "none", "b1") is None
    with pytest.raises(ValueError, match="state_every must be a multiple of 8"):
        pretrain(tiny_tokenizer, *draws, schedule, 0, keeper({}), on_state=print, state_every=12)


def _models(folder):
    for name, text in (("student", "s"), ("teacher", "t")):
        (folder / name / "sub").mkdir(parents=True)
        (folder / name / "config.json").write_text(json.dumps({"name": name}))
        (folder / name / "sub" / "weights.bin").write_text(text * 100)


def test_the_manifest_check_names_the_file_and_the_rebuild_command(tmp_path):
    _models(tmp_path / "math")
    write_manifest(tmp_path / "math", {"builder": "b1", "command": REBUILD})
    paths = verified_models("math", "b1", root=tmp_path)
    assert paths == {"student": str(tmp_path / "math" / "student"), "teacher": str(tmp_path / "math" / "teacher")}

    with pytest.raises(WeightsError, match="built by builder b1, but this code's builder is b2") as info:
        verified_models("math", "b2", root=tmp_path)
    assert REBUILD in str(info.value)

    tampered = tmp_path / "math" / "teacher" / "sub" / "weights.bin"
    tampered.write_text("x" * 100)
    with pytest.raises(WeightsError) as info:
        verified_models("math", "b1", root=tmp_path)
    assert str(tampered) in str(info.value) and "sha256" in str(info.value) and REBUILD in str(info.value)

    tampered.unlink()
    with pytest.raises(WeightsError, match="missing"):
        verified_models("math", "b1", root=tmp_path)
    (tmp_path / "math" / MANIFEST).unlink()
    with pytest.raises(WeightsError, match="no tiny-world weights"):
        verified_models("math", "b1", root=tmp_path)


def test_install_replaces_the_target_whole(tmp_path):
    target, staging = tmp_path / "math", tmp_path / ".math-build"
    (target / "old").mkdir(parents=True)
    (staging / "new").mkdir(parents=True)
    install(staging, target)
    assert sorted(p.name for p in target.iterdir()) == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["math"]


@pytest.mark.parametrize("domain", ["math", "code", "search"])
def test_the_shipped_weights_match_their_manifest_and_this_builder(domain):
    paths = world.models(domain)
    manifest = json.loads((WEIGHTS / domain / MANIFEST).read_text())
    schedule = recipe(domain).schedule
    assert manifest["builder"] == recipe(domain).fingerprint()
    assert manifest["steps"] == {"student": schedule.steps + schedule.student_steps, "teacher": schedule.steps}
    assert set(paths) == {"student", "teacher"}


def test_the_build_command_refuses_a_bad_state_interval_and_a_bad_state_before_building(tmp_path, capsys):
    from verl_masopd.tiny_world.__main__ import main

    with pytest.raises(SystemExit) as info:
        main(["build", "--domain", "math", "--state", str(tmp_path), "--state-every", "12"])
    assert info.value.code == 2
    assert "--state-every must be a positive multiple of 8, got 12" in capsys.readouterr().err
    (tmp_path / STATE).write_bytes(b"not a state")
    out = tmp_path / "weights"
    assert main(["build", "--domain", "math", "--state", str(tmp_path), "--out", str(out)]) == 2
    assert f"{tmp_path / STATE}: unreadable build state" in capsys.readouterr().err
    assert not out.exists()  # refused before any staging folder


def test_a_recipe_variant_has_its_own_fingerprint_and_the_default_keeps_its_own():
    default = recipe("math")
    longer = recipe("math", teacher_steps=9000)
    assert longer.schedule.steps == 9000 and longer.schedule.student_steps == default.schedule.student_steps
    assert longer.schedule.lr_at(8000) > default.schedule.lr_at(7999)  # the decay stretched over 9000 steps
    assert recipe("math", size="world").fingerprint() == default.fingerprint()
    assert len({default.fingerprint(), longer.fingerprint(), recipe("math", size="search").fingerprint()}) == 3
    assert recipe("search").size["num_hidden_layers"] == 6  # the search world ships the deeper size
    shipped = recipe("search", teacher_steps=20000, size="search-deep", precision="fp32").fingerprint()
    assert recipe("search").fingerprint() == shipped
    # the earlier search pair (the first search comparison's) is rebuilt by options: its builder
    earlier = recipe("search", teacher_steps=5000, size="search", precision="bf16")
    assert earlier.fingerprint() == "1a4ecb450ea215ba"
    with pytest.raises(ValueError, match="no model size 'huge'"):
        recipe("math", size="huge")


def test_the_build_command_refuses_a_teacher_schedule_within_the_warm_up(tmp_path, capsys):
    from verl_masopd.tiny_world.__main__ import main

    with pytest.raises(SystemExit) as info:
        main(["build", "--domain", "math", "--teacher-steps", "50", "--out", str(tmp_path / "weights")])
    assert info.value.code == 2
    assert "--teacher-steps must exceed the 50 warm-up steps, got 50" in capsys.readouterr().err
    assert not (tmp_path / "weights").exists()


def test_a_float32_variant_trains_without_autocast_and_keeps_the_default_fingerprint_apart(tiny_tokenizer):
    assert recipe("math", precision="bf16").fingerprint() == recipe("math").fingerprint()
    assert recipe("math", precision="fp32").fingerprint() != recipe("math").fingerprint()
    with pytest.raises(ValueError, match="precision must be one of"):
        recipe("math", precision="fp16")
    draws = MathDemonstrations(tiny_tokenizer).draw, MathDemonstrations(tiny_tokenizer, 0.5).draw
    losses = {}
    for precision in ("bf16", "fp32"):
        schedule = Schedule(steps=3, student_steps=1, role_confusion=0.5, batch_size=2, warmup=1, precision=precision)
        losses[precision] = pretrain(tiny_tokenizer, *draws, schedule, 0, lambda *_: None)
    # the same batches and initial weights: close first losses, not bit-equal ones
    assert losses["bf16"][0] == pytest.approx(losses["fp32"][0], rel=0.02) and losses["bf16"] != losses["fp32"]
