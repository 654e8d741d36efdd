"""Per-run totals and what a run can see, run for real as root: the run's files share one disk
budget, its process tree one memory budget, its /proc holds only its own processes, and its
filesystem holds the system and the interpreter read-only but not the project or /work; the
active protections are reported; the CLI refuses bad arguments in one line."""

import json
import logging
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from verl_masopd.sandbox import Limits, isolation, run_program

REPO = Path(__file__).resolve().parents[2]

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="containment is specified for root-run hosts")
needs_cgroups = pytest.mark.skipif(
    os.geteuid() != 0 or isolation().cgroups is None, reason="per-run memory totals need cgroups"
)


@root_only
def test_the_runs_files_share_one_disk_budget():
    """Files of 8 MiB, each under the per-file cap, into /tmp, /var/tmp and /dev/shm in turn:
    together they stop at the run's 24 MiB."""
    code = (
        "import errno\nwritten = 0\n"
        "for i in range(12):\n"
        "    try:\n"
        "        with open(('/tmp', '/var/tmp', '/dev/shm')[i % 3] + f'/f{i}', 'wb') as f:\n"
        "            f.write(b'x' * (8 << 20))\n"
        "        written += 8\n"
        "    except OSError as e:\n"
        "        print(written, errno.errorcode[e.errno])\n"
        "        break\n"
    )
    result = run_program(code, timeout=10.0, limits=Limits(disk_mb=24, file_size_mb=16))
    assert result.ok, result
    written, error = result.stdout.split()
    assert int(written) <= 24 and error == "ENOSPC"


@needs_cgroups
def test_the_process_trees_memory_has_one_budget():
    """Four children of 128 MiB each, every one under the per-process cap of 256 MiB, do not all
    fit in the run's total: the kernel kills some and the run says so."""
    code = (
        "import os, sys, time\nchildren = []\n"
        "for _ in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        data = b'x' * (128 << 20)\n"
        "        time.sleep(1.0)\n"
        "        os._exit(0)\n"
        "    children.append(pid)\n"
        "alive = sum(os.waitpid(pid, 0)[1] == 0 for pid in children)\n"
        "print(alive)\nsys.exit(0 if alive == 4 else 3)\n"
    )
    result = run_program(code, timeout=10.0, limits=Limits(memory_mb=256, disk_mb=16))
    assert int(result.stdout) < 4 and result.exit_code == 3, result
    assert result.error == "memory limit exceeded (the run's total)"


@root_only
def test_proc_shows_only_the_runs_own_processes():
    secret = "masopd-secret-argument-4d1f"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", secret])
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n    time.sleep(30)\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "seen = b''.join(open(f'/proc/{p}/cmdline', 'rb').read() for p in pids)\n"
        f"print(pids, os.getpid(), {secret.encode()!r} in seen)\n"
    )
    try:
        result = run_program(code, timeout=5.0)
    finally:
        bystander.kill()
        bystander.wait()
    assert result.ok, result
    assert result.stdout == "[1, 2, 3] 2 False\n"


@root_only
def test_command_lines_name_nothing_and_mounts_only_the_view():
    """/proc/1/cmdline (the run's supervisor) and the program's own name neither the bootstrap's
    source nor a host path: they read as `python3 main.py`. /proc/self/mountinfo lists the run's
    own mounts, whose paths are the view's, which the program sees anyway (module doc of
    isolation.py); nothing else of the host, the project and /work outside the view included."""
    code = (
        "import json, sys\n"
        "lines = [open(p, 'rb').read().decode() for p in ('/proc/1/cmdline', '/proc/self/cmdline')]\n"
        "mounts = [line.split()[4] for line in open('/proc/self/mountinfo')]\n"
        "print(json.dumps([lines, sys.orig_argv, mounts]))\n"
    )
    result = run_program(code, timeout=5.0)
    assert result.ok, result
    lines, orig_argv, mounts = json.loads(result.stdout)
    assert [line.rstrip("\0").split("\0") for line in lines] == [["python3", "main.py"]] * 2
    assert orig_argv == ["python3", "main.py"]
    view = {path for path, target in isolation().view if not target}
    assert set(mounts) == {"/", "/tmp", "/proc"} | view, mounts
    assert not any(mount.startswith(str(REPO)) and mount != sys.prefix for mount in mounts), mounts


@root_only
def test_the_filesystem_holds_the_interpreter_read_only_and_not_the_project():
    site = sysconfig.get_paths()["purelib"]
    code = (
        "import os, sys, idna\n"
        f"print(os.path.exists({str(REPO / 'pyproject.toml')!r}), os.path.exists({str(REPO / '.git')!r}))\n"
        f"print(sorted(os.listdir({str(REPO)!r})))\n"
        f"print(os.path.isdir({site!r}), idna.__file__.startswith({site!r}))\n"
        f"for target in ({site + '/x'!r}, sys.executable + '.x', '/usr/x', '/x'):\n"
        "    try:\n        open(target, 'w')\n        print('wrote', target)\n"
        "    except OSError as e:\n        print(e.errno in (13, 30))\n"
    )
    result = run_program(code, timeout=5.0)
    assert result.ok, result
    in_view = [Path(path) for path, _ in isolation().view]
    inside_repo = sorted({path.relative_to(REPO).parts[0] for path in in_view if REPO in path.parents})
    assert result.stdout.splitlines() == ["False False", str(inside_repo), "True True", "True", "True", "True", "True"]
    assert ".git" not in inside_repo and "verl_masopd" not in inside_repo


@root_only
def test_active_protections_are_reported_at_start_up(caplog):
    isolation.cache_clear()
    with caplog.at_level(logging.INFO, logger="verl_masopd.sandbox.isolation"):
        setup = isolation()
    assert f"sandbox protections: {'; '.join(setup.protections)}" in caplog.messages
    assert "network, IPC, mount and PID namespaces" in setup.protections
    if setup.cgroups is not None:
        described = "memory and pids totals, CPU share and CPU time per run"
        assert f"cgroup v{setup.cgroups.version} {described}" in setup.protections
    completed = subprocess.run(
        [sys.executable, "-m", "verl_masopd.sandbox", "protections"], capture_output=True, text=True, check=True
    )
    assert json.loads(completed.stdout)["protections"] == list(setup.protections)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--timeout", "0"], "argument --timeout: must be a positive finite number of seconds, got '0'"),
        (["--timeout", "-5"], "argument --timeout: must be a positive finite number of seconds, got '-5'"),
        (["--timeout", "nan"], "argument --timeout: must be a positive finite number of seconds, got 'nan'"),
        (["--timeout", "inf"], "argument --timeout: must be a positive finite number of seconds, got 'inf'"),
        (["--timeout", "1e9"], "argument --timeout: must be at most 86400 seconds (one day), got '1e9'"),
        (["--timeout", "86400.5"], "argument --timeout: must be at most 86400 seconds (one day), got '86400.5'"),
        (["--timeout", "1"], "cannot read /nonexistent/prog.py: No such file or directory"),
    ],
)
def test_cli_refuses_bad_arguments_in_one_line(arguments, message):
    completed = subprocess.run(
        [sys.executable, "-m", "verl_masopd.sandbox", "run", *arguments, "/nonexistent/prog.py"],
        input="",
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.splitlines() == [completed.stderr.strip()]
    assert completed.stderr.strip().endswith(f"error: {message}")
