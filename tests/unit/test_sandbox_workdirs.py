"""The runs' working folders on the host (workdirs.py): a SIGKILLed owner's in-flight folders are
removed by the next process that starts the sandbox, a live owner's are kept, and an owner is
told from a later process that reuses its pid by the pid's start time."""

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verl_masopd.sandbox.workdirs import PREFIX, owner_tag, remove_orphans

IN_FLIGHT = "from verl_masopd.sandbox import run_program\nrun_program('import time\\ntime.sleep(60)', timeout=100)\n"
STARTS_THE_SANDBOX = "from verl_masopd.sandbox import run_program\nassert run_program('print(1)').ok\n"


def folders() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), f"{PREFIX}*")))


def owner_with_a_run_in_flight() -> tuple[subprocess.Popen, str]:
    """A process (a trainer) whose run sleeps, and the run's working folder once it exists."""
    before = folders()
    owner = subprocess.Popen([sys.executable, "-c", IN_FLIGHT])
    deadline = time.monotonic() + 30.0
    while not (new := folders() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(new) == 1, new
    return owner, new.pop()


def test_a_killed_owners_folders_are_removed_when_the_sandbox_next_starts():
    dead, left = owner_with_a_run_in_flight()
    live, kept = owner_with_a_run_in_flight()
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        time.sleep(0.5)  # its zygote and supervisor end with it, its folder stays
        assert os.path.isdir(left)
        subprocess.run([sys.executable, "-c", STARTS_THE_SANDBOX], check=True, timeout=60)
        assert not os.path.exists(left)
        assert os.path.isdir(kept) and live.poll() is None
    finally:
        live.kill()
        live.wait()
        shutil.rmtree(kept, ignore_errors=True)


def test_a_reused_pid_is_not_its_folders_owner(tmp_path: Path):
    """A folder naming this process's pid with another start time belongs to a process gone."""
    mine = tmp_path / f"{PREFIX}{owner_tag(os.getpid())}-mine"
    namespace, pid, _ = owner_tag(os.getpid()).split("-")
    earlier = tmp_path / f"{PREFIX}{namespace}-{pid}-1-earlier"
    elsewhere = tmp_path / f"{PREFIX}1-{pid}-1-other-pid-namespace"
    unnamed = tmp_path / f"{PREFIX}unnamed"
    for folder in (mine, earlier, elsewhere, unnamed):
        folder.mkdir()
    assert remove_orphans(str(tmp_path)) == [str(earlier)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f.name for f in (mine, elsewhere, unnamed))
