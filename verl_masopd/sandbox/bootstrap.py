"""Supervisor of one sandboxed run; executed with `python -c` and argv[1] = JSON config (stdlib only).

The supervisor becomes a child subreaper, enters fresh network and mount namespaces when
asked, then forks the program process. That process applies the rlimits, drops to the run's
unprivileged uid and executes main.py as `__main__`. The supervisor never runs model code: it
reaps every process that is orphaned under it, and once the program has exited it kills every
remaining process of the run (all processes of the uid, or its own children when unprivileged),
reaps them and exits with the program's status.
"""

import ctypes
import json
import os
import resource
import signal
import sys
import traceback
import types

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

config = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)


def checked(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def encoded(text):
    return None if text is None else text.encode()


def mount(source, target, fstype, flags, data=None):
    checked(libc.mount(encoded(source), encoded(target), encoded(fstype), flags, encoded(data)), f"mount {target}")


def enter_namespaces():
    """Private network (loopback only) and mount namespace: world-writable dirs show the workdir,
    directories the uid cannot reach are masked by a tmpfs that re-exposes only the interpreter."""
    checked(libc.unshare(CLONE_NEWNET | CLONE_NEWNS), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    workdir = os.open(config["workdir"], os.O_PATH)
    for masked, exposed in config["expose"]:
        keep = {path: os.open(path, os.O_PATH) for path in exposed}
        mount("tmpfs", masked, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        for path, fd in keep.items():
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    for shared in config["shadow"]:
        mount(f"/proc/self/fd/{workdir}", shared, None, MS_BIND)


def run_program():
    limits = config["rlimits"]
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))
    uid = config["uid"]
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    checked(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
    os.chdir(config["cwd"])
    sys.argv = ["main.py"]
    with open("main.py", "rb") as handle:
        source = handle.read()
    try:
        code = compile(source, "main.py", "exec")
    except (SyntaxError, ValueError) as error:
        traceback.print_exception(type(error), error, None)
        sys.exit(1)
    main = types.ModuleType("__main__")
    main.__file__ = "main.py"
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    except SystemExit:
        raise
    except BaseException as error:
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        sys.exit(1)


def kill_run_processes():
    uid = config["uid"]
    if uid is None:
        for pid in own_children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return
    helper = os.fork()
    if helper == 0:
        try:
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(helper, 0)


def own_children():
    me = str(os.getpid())
    children = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == me and fields[0] != "Z":
            children.append(int(name))
    return children


def supervise(program):
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    status = None
    while status is None:
        pid, wait_status = os.waitpid(-1, 0)
        if pid == program:
            status = wait_status
    while True:
        kill_run_processes()
        try:
            os.waitpid(-1, 0)
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            break
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


checked(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl")
if config["namespaces"]:
    enter_namespaces()
child = os.fork()
if child == 0:
    run_program()
    sys.exit(0)
supervise(child)
