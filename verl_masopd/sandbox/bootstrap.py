"""The sandbox zygote (stdlib and sortedcontainers): executed as `python -s -B -` with this source
on stdin, argv[1] = its control socket fd.

The zygote is a long-lived process with the interpreter, this bootstrap and the modules programs
commonly import already loaded. It never runs model code. Per request received on the control
socket (a JSON config plus the fds of the run's channel, stdin, stdout and stderr) it forks a
supervisor, so each run starts from a fresh copy of the zygote and nothing a program changes
(modules, sys.path, builtins, environment) reaches the next run. It exits when the control
socket closes. It is a child subreaper that ignores SIGCHLD: whatever a killed supervisor leaves
is reparented to it and reaped at once, never left a zombie under the host's init.

With namespaces, the zygote forks each supervisor as PID 1 of a new PID namespace; the
supervisor enters its uid's network namespace and fresh IPC and mount namespaces, builds the
run's filesystem (a tmpfs root holding the read-only view, the devices, a size-limited /tmp with
main.py, its own /proc), chroots into it and forks the program, which joins the slot's cgroups
(the supervisor stays outside them, so that nothing its run does slows it down). Every process
the program leaves behind is reparented to the supervisor, which reaps it; once the program has
exited, or the channel asks it to stop (or closes), it kills every other process of its
namespace and reaps them. If the supervisor itself dies, the kernel kills every process of its
namespace. Without namespaces the supervisor, a child subreaper, forks the program itself and
kills the uid's processes (or its own children when unprivileged) at the end.

The program sends "started" with a pidfd of its supervisor once it is in the slot's cgroups (the
run's clock starts then); the supervisor sends the last message, the program's wait status, once
nothing of the run but itself is left. Each supervisor first blanks its command line to TITLE, which its program
inherits, so that neither's /proc/<pid>/cmdline names the interpreter's path or the zygote's
arguments. The program process joins the slot's cgroups, closes every inherited fd but
stdin/stdout/stderr, applies the rlimits, drops to the run's unprivileged uid, replaces the
environment (a failure up to here is reported as the sandbox's) and executes main.py as
`__main__` (sys.argv and sys.orig_argv those of `python3 main.py`); it then ends like any
Python program (non-daemon threads joined, atexit handlers run, its globals released so that
their finalizers run, streams flushed, the same exit status) but skips the interpreter's
teardown of the zygote's modules, which would copy most of the zygote's memory page by page.
"""

import atexit
import ctypes
import gc
import json
import os
import resource
import select
import signal
import socket
import stat
import sys
import threading
import traceback
import types

# The program prelude: what competitive-programming and LeetCode-style judges provide without an
# import, imported here (`prelude`) so that each run's fork finds it ready.
import ast
import builtins
import importlib

PRELUDE_STAR_IMPORTS = (
    "typing bisect collections copy functools heapq itertools math operator random re statistics string "
    "sortedcontainers"
).split()
PRELUDE_MODULES = (
    "bisect collections copy datetime functools heapq itertools json math operator random re statistics string "
    "sys typing"
).split()
FUNCTION_SCOPE_ERRORS = ("'return' outside function", "nonlocal declaration not allowed", "no binding for nonlocal")
PROGRAM_FUNCTION = "_masopd_program"


def prelude():
    """The names every program starts with: `from M import *` of PRELUDE_STAR_IMPORTS (typing's
    List and Optional, deque, Counter, heappush, bisect_left, accumulate, lru_cache, inf,
    factorial, comb, gcd, ascii_lowercase, SortedList, ...), then the PRELUDE_MODULES themselves
    by name (`math.` and `collections.` work; the module wins over a same-named function such as
    bisect.bisect). No builtin is ever shadowed (`pow` keeps its three-argument form,
    `compile` and `abs` stay the builtins)."""
    names = {}
    for module in map(importlib.import_module, PRELUDE_STAR_IMPORTS):
        public = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        names.update({name: getattr(module, name) for name in public})
    names.update({name: importlib.import_module(name) for name in PRELUDE_MODULES})
    for name in vars(builtins):
        names.pop(name, None)
    return names


PRELUDE = prelude()


def compile_program(source):
    """main.py compiled as a module, or, when it is only valid as a function body (a top-level
    `return`, a `nonlocal` naming a module-level variable), as one: APPS's and LiveCodeBench's
    harnesses run every stdin program inside a function. A program that compiles neither way
    raises the module's SyntaxError."""
    try:
        return compile(source, "main.py", "exec")
    except SyntaxError as error:
        if not error.msg.startswith(FUNCTION_SCOPE_ERRORS):
            raise
        try:
            return compile(as_function(ast.parse(source)), "main.py", "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise error from None


def as_function(module):
    """The module's statements as the body of a function the module then calls, line numbers
    kept. Future and star imports stay at module level (a function cannot hold them); names that
    some function declares `global` are declared global in the new function too, so that they
    still name one variable."""
    hoisted = [
        statement
        for statement in module.body
        if isinstance(statement, ast.ImportFrom)
        and (statement.module == "__future__" or any(alias.name == "*" for alias in statement.names))
    ]
    body = [s for s in module.body if not isinstance(s, ast.Global) and all(s is not h for h in hoisted)]
    shared = sorted({name for node in ast.walk(module) if isinstance(node, ast.Global) for name in node.names})
    if shared:
        body.insert(0, ast.Global(names=shared))
    arguments = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
    function = ast.FunctionDef(name=PROGRAM_FUNCTION, args=arguments, body=body or [ast.Pass()], decorator_list=[])
    if "type_params" in ast.FunctionDef._fields:
        function.type_params = []
    call = ast.Expr(ast.Call(ast.Name(PROGRAM_FUNCTION, ast.Load()), [], []))
    module.body = [*hoisted, function, call]
    return ast.fix_missing_locations(module)


CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
MAX_REQUEST_BYTES = 1 << 16
REQUEST_FDS = 4
REAP_INTERVAL_S = 0.05
TITLE = ("python3", "main.py")

libc = ctypes.CDLL(None, use_errno=True)


def checked(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def encoded(text):
    return None if text is None else text.encode()


def mount(source, target, fstype, flags, data=None):
    checked(libc.mount(encoded(source), encoded(target), encoded(fstype), flags, encoded(data)), f"mount {target}")


def serve(control):
    """Fork a supervisor per request (with namespaces, as PID 1 of a new PID namespace) and
    return in it with (config, fds, the fd of the run's network namespace or None); exit when
    the parent closes."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    checked(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl")
    own_pids = os.open("/proc/self/ns/pid", os.O_RDONLY)
    networks = {}
    while True:
        message, fds, _, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, REQUEST_FDS)
        if not message:
            os._exit(0)
        config = json.loads(message)
        network = None
        if config["namespaces"]:
            network = uid_network(networks, config["uid"])
            checked(libc.unshare(CLONE_NEWPID), "unshare")
        if os.fork() == 0:
            control.close()
            os.close(own_pids)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            blank_command_line()
            return config, fds, network
        if config["namespaces"]:
            checked(libc.setns(own_pids, CLONE_NEWPID), "setns")
        for fd in fds:
            os.close(fd)


def blank_command_line():
    """Overwrite the memory of this process's arguments (what /proc/<pid>/cmdline reads) with
    TITLE; the interpreter keeps its own copy of them (sys.orig_argv)."""
    with open("/proc/self/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end, fields 48 and 49 of proc(5)
    title = "\0".join(TITLE).encode()[: end - start - 1]
    ctypes.memset(start, 0, end - start)
    ctypes.memmove(start, title, len(title))


def uid_network(networks, uid):
    """The fd of `uid`'s network namespace (loopback only, down), created at its first run.

    Creating and destroying a network namespace per run is costly; one per slot uid isolates
    runs just as well, since runs of a uid never overlap and nothing of a run (sockets, abstract
    socket names) outlives its processes, and no unprivileged process can configure one.
    """
    if uid not in networks:
        checked(libc.unshare(CLONE_NEWNET), "unshare")
        networks[uid] = os.open("/proc/self/ns/net", os.O_RDONLY)
    return networks[uid]


def enter_namespaces(config, network):
    """The uid's network namespace, fresh IPC (SysV objects and POSIX message queues die with
    the run) and mount namespaces, and the run's filesystem."""
    checked(libc.setns(network, CLONE_NEWNET), "setns")
    os.close(network)
    checked(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    build_view(config)


def join_cgroups(procs):
    """Move this process into the cgroups whose cgroup.procs files `procs` (fds) are open."""
    for fd in procs:
        os.write(fd, b"0")
        os.close(fd)


def build_view(config):
    """Make the run's filesystem on a tmpfs at the view's mount point and chroot into it: the view's
    paths bound read-only, the devices made anew (/dev/null, ...), /tmp a tmpfs of the run's disk
    size owned by its uid holding main.py (/var/tmp and /dev/shm lead to it), a /proc of its own."""
    root, uid = config["root"], config["uid"]
    with open(os.path.join(config["workdir"], "main.py"), "rb") as handle:
        code = handle.read()
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID, "mode=0755,size=1m")
    # the run's own /tmp first: view paths below /tmp (an interpreter installed there) are bound inside it
    tmp = root + "/tmp"
    os.mkdir(tmp)
    size = config["disk_bytes"]
    mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0700,uid={uid},gid={uid},size={size}")
    for path, target in config["view"]:
        inside = root + path
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        if target:
            os.symlink(target, inside)
            continue
        if os.path.isdir(path):
            os.mkdir(inside)
        else:
            os.close(os.open(inside, os.O_CREAT | os.O_WRONLY, 0o644))
        mount(path, inside, None, MS_BIND | MS_REC)
        mount(None, inside, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.makedirs(root + "/dev", exist_ok=True)
    for device in config["devices"]:
        os.mknod(root + device, 0o666 | stat.S_IFCHR, os.stat(device).st_rdev)
        os.chmod(root + device, 0o666)
    with open(tmp + "/main.py", "wb") as handle:
        handle.write(code)
    os.makedirs(root + "/var", exist_ok=True)
    os.makedirs(root + "/proc", exist_ok=True)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    links = {"/var/tmp": "/tmp", "/dev/shm": "/tmp", "/dev/fd": "/proc/self/fd"}
    links.update({f"/dev/{name}": f"/proc/self/fd/{fd}" for fd, name in enumerate(("stdin", "stdout", "stderr"))})
    for link, target in links.items():
        os.symlink(target, root + link)
    os.chroot(root)
    os.chdir("/")


def enter_program(config, channel, stdio, cgroups, supervisor):
    """In the program process: join the slot's cgroups (`cgroups`: fds of their cgroup.procs
    files), send "started" with `supervisor` (a pidfd of the supervisor) on `channel`, take
    `stdio` as stdin/stdout/stderr, close every other fd, apply the rlimits (each at most the
    hard limit this host gives, which root without CAP_SYS_RESOURCE cannot raise), drop
    privileges, and return main.py compiled (or exit 1 with the compile error). The run's clock
    starts at "started", once the program is in its cgroups (joining may wait on the kernel's
    cgroup locks, which a busy machine holds long). A failure before main.py is compiled is the
    sandbox's: reported on `channel` as such, never passed off as the program's exit."""
    try:
        join_cgroups(cgroups)
        socket.send_fds(channel, [b"started"], [supervisor])
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        keep = channel.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        for name, value in config["rlimits"].items():
            limit = getattr(resource, name)
            hard = resource.getrlimit(limit)[1]
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (value, value))
        uid = config["uid"]
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        checked(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
        os.environ.clear()
        os.environ.update(config["env"])
        os.chdir(config["cwd"])
        sys.argv = list(TITLE[1:])
        sys.orig_argv = list(TITLE)
        with open("main.py", "rb") as handle:
            source = handle.read()
    except Exception as error:
        finish(channel, {"error": f"the program's set-up failed: {type(error).__name__}: {error}"})
    channel.close()
    try:
        return compile_program(source)
    except (SyntaxError, ValueError) as error:
        traceback.print_exception(type(error), error, None)
        sys.exit(1)


def run_as_main(code):
    """Execute the program as `__main__`; return its module and exit status (SystemExit's code,
    printed when it is not an int, or 1 after an uncaught exception)."""
    main = types.ModuleType("__main__")
    main.__file__ = "main.py"
    main.__dict__.update(PRELUDE)
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    except SystemExit as exit:
        return main, exit_status(exit.code)
    except BaseException as error:
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        return main, 1
    return main, 0


def exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def end_program(main, status):
    """End as the interpreter's shutdown would: join non-daemon threads, run atexit handlers,
    release the program's globals, flush stdout and stderr (status 120 when that fails)."""
    current = threading.current_thread()
    while running := [t for t in threading.enumerate() if t is not current and not t.daemon and t.is_alive()]:
        for thread in running:
            thread.join()
    atexit._run_exitfuncs()
    main.__dict__.clear()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception as error:
            status = 120
            if stream is sys.stdout:
                print(f"Exception ignored in: {stream!r}", file=sys.stderr)
                traceback.print_exception(type(error), error, None)
    os._exit(status)


def kill_namespace():
    """As PID 1 of the run's PID namespace: SIGKILL every other process in it."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_run_processes(uid):
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


def reap(program):
    """Reap every exited child without blocking: (the program's wait status if it was among
    them, whether children are left)."""
    status = None
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, False
        if pid == 0:
            return status, True
        if pid == program:
            status = wait_status


def supervise(channel, child, stop):
    """Wait for `child` (reaping orphans) or a stop request (then `stop()`), then make sure
    nothing of the run is left; the child's wait status.

    Every process the child left behind has been reparented to this subreaper (with namespaces,
    to this PID 1 of the run's PID namespace), so once no child is left, nothing of the run is.
    """
    exited = os.pidfd_open(child)
    stopping = False
    status = None
    while status is None:
        watched = [exited] if stopping else [exited, channel]
        ready, _, _ = select.select(watched, [], [], REAP_INTERVAL_S)
        if channel in ready:
            stopping = True
            stop()
        status, _ = reap(child)
    while reap(None)[1]:
        stop()
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    return status


def start_run(config, fds, network):
    """In a fresh supervisor: return in the forked program process; in the supervisor itself
    report the program's wait status (or the failure) once nothing of the run is left, and exit."""
    channel_fd, *stdio = fds
    channel = socket.socket(fileno=channel_fd)
    uid = config["uid"]
    try:
        checked(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl")
        cgroups = [os.open(procs, os.O_WRONLY) for procs in config["cgroups"]]  # before the chroot hides them
        if config["namespaces"]:
            enter_namespaces(config, network)
        supervisor = os.pidfd_open(os.getpid())
        program = os.fork()
        if program == 0:
            return enter_program(config, channel, stdio, cgroups, supervisor)
        for fd in (*stdio, *cgroups, supervisor):
            os.close(fd)
    except Exception as error:
        finish(channel, {"error": f"{type(error).__name__}: {error}"})
    stop = kill_namespace if config["namespaces"] else lambda: kill_run_processes(uid)
    try:
        reply = {"status": supervise(channel, program, stop)}
    except Exception as error:
        reply = {"error": f"{type(error).__name__}: {error}"}
    finish(channel, reply)


def finish(channel, reply):
    """Send the supervisor's last message (the runner may have stopped listening) and exit."""
    try:
        channel.send(json.dumps(reply).encode())
    except OSError:
        pass
    os._exit(0)


def main():
    # The zygote's objects stay out of every fork's collections, so their pages stay shared
    # instead of being copied on write (the gc.freeze use the Python docs describe).
    gc.freeze()
    config, fds, network = serve(socket.socket(fileno=int(sys.argv[1])))
    program, status = run_as_main(start_run(config, fds, network))
    end_program(program, status)


main()
