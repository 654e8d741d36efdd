"""Every containment case of the sandbox, run for real as root: each is contained within the
timeout plus one second, leaves no process of the sandbox uids (zombies included) and no file
outside its working directory."""

import concurrent.futures
import fcntl
import glob
import os
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest

from verl_masopd.sandbox import Limits, isolation, run_many, run_program
from verl_masopd.sandbox.isolation import SLOT_COUNT, SLOT_UID_BASE, slot_lock_dir, slot_uid

TIMEOUT = 2.0

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="containment is specified for root-run hosts")


UID_REPORT = "import os as _os, sys as _sys\n_sys.stderr.write(f'uid={_os.getuid()}\\n')\n"


def processes_of(uid: int) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]


def files_of(uid: int) -> list[str]:
    return [
        entry.path
        for directory in ("/tmp", "/var/tmp", "/dev/shm")
        for entry in os.scandir(directory)
        if entry.stat(follow_symlinks=False).st_uid == uid
    ]


def contained(code: str, stdin: str = "", limits: Limits | None = None):
    """Run `code` (reporting its uid on stderr first) and check it left nothing behind."""
    result = run_program(UID_REPORT + code, stdin, timeout=TIMEOUT, limits=limits)
    assert result.duration <= TIMEOUT + 1.0, result
    uid = int(result.stderr.split("uid=", 1)[1].split()[0])
    assert SLOT_UID_BASE <= uid < SLOT_UID_BASE + SLOT_COUNT
    assert processes_of(uid) == []
    assert files_of(uid) == []
    return result


def test_runs_without_root_privileges():
    result = contained("import os\nprint(os.getuid(), os.getgid(), os.getgroups())")
    uid, gid, groups = result.stdout.split(maxsplit=2)
    assert SLOT_UID_BASE <= int(uid) < SLOT_UID_BASE + SLOT_COUNT
    assert gid == uid and groups.strip() == "[]"
    assert isolation().privileged and isolation().warnings == ()


def test_fork_bomb():
    result = contained("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
    assert result.timed_out and result.exit_code is None
    # its processes keep both cores busy: its CPU time may run out before its wall clock
    assert (result.limit, result.error) in [("wall", "timeout after 2.0s"), ("cpu", "timeout after 2.0s of CPU time")]


def test_process_limit_binds_as_root():
    code = (
        "import os, time\nstarted = 0\nfor _ in range(100):\n    try:\n        pid = os.fork()\n"
        "    except BlockingIOError:\n        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
        "    started += 1\nprint(started)\n"
    )
    result = contained(code, limits=Limits(processes=8))
    assert result.ok
    assert int(result.stdout) < 8


@pytest.mark.parametrize(
    "code, limits",
    [
        ("data = bytearray(2 * 1024 ** 3)\n", Limits()),
        ("blocks = []\nwhile True:\n    blocks.append(bytearray(32 * 1024 * 1024))\n", Limits(memory_mb=256)),
    ],
    ids=["one-allocation", "growing"],
)
def test_memory_hog(code, limits):
    result = contained(code, limits=limits)
    assert result.exit_code == 1 and not result.timed_out
    assert result.error == "memory limit exceeded"


def test_infinite_loop():
    result = contained("while True:\n    pass\n")
    assert result.timed_out and result.error == "timeout after 2.0s"


def test_sleep_past_timeout():
    result = contained("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    assert result.timed_out and result.stdout == "started\n"


def test_detached_child_does_not_outlive_the_program():
    code = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(60)\n    os._exit(0)\nprint('parent done')\n"
    )
    result = contained(code)
    assert result.ok and result.stdout == "parent done\n"
    assert result.duration < TIMEOUT


def test_huge_output_is_capped():
    result = contained("while True:\n    print('x' * 1000)\n", limits=Limits(output_bytes=10_000))
    assert result.truncated and not result.timed_out
    assert len(result.stdout) == 10_000
    assert result.error == "output truncated at 10000 bytes"


def test_writes_outside_its_directory():
    marker = f"sandbox-escape-{uuid.uuid4().hex}"
    outside = [str(Path(__file__).parent / marker), f"/root/{marker}"] + [
        f"{d}/{marker}" for d in ("/tmp", "/var/tmp", "/dev/shm")
    ]
    code = (
        f"import os\nfor path in {outside!r}:\n    try:\n        open(path, 'w').write('x')\n"
        "        print('wrote', path)\n    except OSError as error:\n        print('refused', path, error.errno)\n"
        f"open({marker!r} + '.local', 'w').write('x')\nprint(sorted(os.listdir('.')))\n"
    )
    result = contained(code)
    assert result.ok, result
    lines = result.stdout.splitlines()
    assert lines[0].startswith("refused") and lines[1].startswith("refused")
    assert marker + ".local" in lines[-1]
    for path in outside:
        assert not os.path.exists(path)
    assert glob.glob(f"/tmp/*/{marker}*") == []


def test_parent_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("MASOPD_TEST_SECRET", "hunter2-secret")
    code = (
        "import os\nprint(dict(os.environ))\nfor pid in (os.getppid(), 1):\n    try:\n"
        "        print(open(f'/proc/{pid}/environ').read())\n    except OSError as error:\n"
        "        print('refused', error.errno)\n"
    )
    result = contained(code)
    assert result.ok
    assert "hunter2" not in result.stdout
    assert "MASOPD_TEST_SECRET" not in result.stdout
    assert result.stdout.count("refused 13") == 2


def test_network_socket_is_unreachable():
    code = (
        "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=1)\n    print('connected')\n"
        "except OSError as error:\n    print('errno', error.errno)\n"
    )
    result = contained(code)
    assert result.ok and result.stdout.strip() == "errno 101"


def test_reading_stdin_forever():
    result = contained("import sys\nwhile True:\n    sys.stdin.read(1)\n", stdin="abc")
    assert result.timed_out and result.error == "timeout after 2.0s"


def test_program_holds_no_descriptor_but_its_standard_streams():
    code = (
        "import os\nheld = []\nfor fd in range(1024):\n    try:\n        os.fstat(fd)\n"
        "        held.append(fd)\n    except OSError:\n        pass\nprint(held)\n"
    )
    result = contained(code)
    assert result.ok and result.stdout == "[0, 1, 2]\n"


def test_concurrent_runs_cannot_reach_each_other_through_abstract_sockets():
    listener = (
        "import socket, time\nserver = socket.socket(socket.AF_UNIX)\nserver.bind('\\0masopd-test-rendezvous')\n"
        "server.listen()\nprint('listening', flush=True)\ntime.sleep(1.5)\n"
    )
    caller = (
        "import socket, time\ntime.sleep(0.5)\nclient = socket.socket(socket.AF_UNIX)\ntry:\n"
        "    client.connect('\\0masopd-test-rendezvous')\n    print('connected')\n"
        "except OSError as error:\n    print('errno', error.errno)\n"
    )
    listened, called = run_many([(listener, ""), (caller, "")], timeout=TIMEOUT, max_workers=2)
    assert listened.ok and listened.stdout == "listening\n"
    assert called.ok and called.stdout == "errno 111\n"


def test_a_slot_left_unclean_is_cleared_when_taken():
    """A slot whose last holder did not mark it clean has its leftover processes killed."""
    target = SLOT_UID_BASE + 5
    lock_dir = Path(slot_lock_dir())
    others = []
    for uid in range(SLOT_UID_BASE, SLOT_UID_BASE + SLOT_COUNT):
        if uid != target:
            handle = open(lock_dir / str(uid), "a")
            fcntl.flock(handle, fcntl.LOCK_EX)
            others.append(handle)
    (lock_dir / str(target)).write_text("")
    leftover = subprocess.Popen(["sleep", "60"], user=target, group=target)
    reaper = concurrent.futures.ThreadPoolExecutor(1).submit(leftover.wait)  # its zombie counts until reaped
    try:
        with slot_uid() as uid:
            assert uid == target
            assert reaper.result(5) == -9
        assert (lock_dir / str(target)).read_text() == "clean"
    finally:
        leftover.kill()
        for handle in others:
            handle.close()


def test_sysv_ipc_objects_do_not_outlive_their_run():
    """A shared-memory segment made by one run is invisible to the next (private IPC namespace)."""
    make = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        "print(libc.shmget(0x6d61736f, 4096, 0o1666))\n"  # IPC_CREAT | 0666
    )
    find = "import ctypes\nprint(ctypes.CDLL(None).shmget(0x6d61736f, 4096, 0o666))\n"
    created = run_program(make, timeout=5)
    assert created.ok and int(created.stdout) >= 0, created
    found = run_program(find, timeout=5)
    assert found.ok and int(found.stdout) == -1, found
