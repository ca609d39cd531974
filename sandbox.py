"""The sandbox that runs a model's Python code, and the hidden-test harness that scores it there: one copy.

grpo_tools.py and grpo_code.py import `run_python` (the tool the model calls) from this module, and grpo_code.py
also `run_hidden_tests_batch` (its reward); nothing else in the project holds a sandbox. This module needs only the
standard library (no torch, no transformers, no project imports): copy it beside a script that uses it.

What is here, in order:
- The limits, module constants: PYTHON_* for a call, TEST_* and SCORING_THREADS for the hidden tests. Change one
  before the first call, e.g. `import sandbox; sandbox.PYTHON_CPU_S = 10`: the sandbox's zygote reads the
  memory, file and process limits once, when it starts; the others (time included) are read at each call.
- The sandbox: `_SANDBOX_ZYGOTE` (one waiting interpreter that forks a contained process per call), `_Sandbox`,
  `SANDBOX_MODES`, `_start_sandbox`, `_sandbox_mode` (the strongest mode that works here, or GRPO_SANDBOX's),
  `_run_in_sandbox`.
- `run_python(code) -> str`: the tool. The comment above it says what a call contains and what not, per mode:
  read it before you offer this tool to a model.
- The hidden tests: `_HIDDEN_TESTS_HARNESS`, `run_hidden_tests` (one solution; results cached, failures not) and
  `run_hidden_tests_batch` (many, in parallel), for a function, a class's method (`Solution().twoSum`) or a program
  that reads stdin (`STDIN_PROGRAM`). The comment above the harness says why it cannot be fooled.

What a call contains, in short (in full above `run_python`): in every mode 5 s of CPU (a 25 s wall-clock backstop), 512 MB, 1 MB per file,
an empty environment, a fresh fork of one clean interpreter, and (x86_64, aarch64) a seccomp filter that refuses
the kernel's risky interfaces (io_uring, bpf, perf_event_open, userfaultfd, keyrings, modules, kexec, ptrace,
process_vm_*, mounts and new namespaces, open_by_handle_at, personality). Mode "namespaces" (root, or user
namespaces): a read-only root of only the interpreter, no network, its own processes, /tmp and /dev/shm, run as
"nobody". Mode "landlock" (no namespaces, Linux 5.13+): the interpreter's files read-only and its own folder, no
new socket, no leaving its process group. Mode "plain" (neither; with a warning): the machine's files and network
are reachable. What it does not contain, in any mode: the kernel is shared, and disk, memory and CPU bandwidth
are not reserved. It is for a model's scratch code and hidden tests, not for hostile code (for that: gVisor,
Firecracker, nsjail).
GRPO_SANDBOX=namespaces|landlock|plain forces a mode; any other value is an error that names these.

Why the hidden-test harness lives here and not in grpo_code.py: it is containment, not recipe. It holds the
guarantees that a solution cannot fool its grader (exit early, forge the result line, return an object equal to
anything, read the tests from files or memory, kill the harness), checked by tests/test_code_harness.py against a
battery of hacks in every mode. A forker who edits a reward should not have to read it, nor be able to break it by
accident: the reward function in the script just calls run_hidden_tests_batch.
"""

import array, atexit, concurrent.futures, glob, json, math, os, re, shutil, signal, socket, subprocess  # noqa: E401
import sys, sysconfig, tempfile, threading, warnings  # noqa: E401

# ---- limits: module constants; set one before the first call (`sandbox.PYTHON_CPU_S = 10`)
PYTHON_CPU_S = 5                  # CPU seconds one run_python call may take, all its processes together
PYTHON_WALL_S = 25                # its wall-clock backstop, for code that sleeps or blocks (5x: a busy machine's room)
PYTHON_MEMORY_BYTES = 512 * 2**20  # address space (RLIMIT_AS): large allocations raise MemoryError
PYTHON_FILE_BYTES = 2**20         # any one file, its captured output included (RLIMIT_FSIZE)
PYTHON_TMP_BYTES = 64 * 2**20     # the call's whole /tmp (its working directory); /dev/shm gets a quarter
PYTHON_MAX_PROCESSES = 64         # processes of "nobody", all calls together (only set when dropping root)
PYTHON_MAX_CODE_CHARS = 100_000   # longer code is refused
PYTHON_OUTPUT_CHARS = 2000        # returned to the model: the start and the end of longer output
# The hidden tests limit what a solution costs, not what the machine is doing: CPU seconds, which a busy machine
# does not change (the solution's process and every process it starts), and a wall clock only as a backstop for
# code that sleeps or blocks, TEST_WALL_FACTOR times as long (room for a machine 5 times oversubscribed).
TEST_CASE_CPU_S = 2                # CPU seconds one test case may take (a case: one statement of the tests)
TESTS_CPU_S = 4                    # CPU seconds all of one solution's cases may take together
TEST_WALL_FACTOR = 5               # the wall-clock backstop: this many times the CPU limit
TEST_ERROR_CHARS = 200             # why a case failed, as kept in the eval files
TEST_REPLY_BYTES = 2**20           # the largest return value the solution's process may send back
TEST_CACHE_SIZE = 8192             # run_hidden_tests' results kept (a solution scored twice runs once)
# Solutions scored at once: the sandbox runs them in parallel. Each takes 2 of the PYTHON_MAX_PROCESSES that all
# calls share, so at most 16 at once leaves room for the solutions' own processes.
SCORING_THREADS = min(16, 2 * (os.cpu_count() or 1))


# ---- the sandbox behind `run_python`: the zygote, its modes, and starting one
_SANDBOX, _SANDBOX_LOCK = None, threading.Lock()

# What a call's processes have used, read from /proc: one copy, for the zygote (a run_python call's CPU limit) and the
# hidden-test harness (a case's and a solution's). Counting CPU, not the clock, is what keeps a verdict the same on a
# busy machine; each process also holds RLIMIT_CPU, which stops it alone where this count cannot see it.
_PROCESS_TREE_CPU = r"""
def process_tree_cpu(me):
    # CPU seconds used by the processes process `me` started: its descendants, living or ended, with what their ended
    # children used (and, where `me`'s parent is PID 1 of a namespace of the call's own, the orphans PID 1 adopted).
    # Not `me`'s own. None where /proc cannot be read (inside a call of the Landlock mode).
    try:
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        fields = f.read().rsplit(b")", 1)[1].split()
                except OSError:
                    continue  # ended meanwhile
                stats[int(name)] = [int(x) for x in fields[1:2] + fields[11:15]]  # ppid; utime, stime, cutime, cstime
    except OSError:
        return None
    if me not in stats:
        return None
    children = {}
    for pid, (ppid, *_) in stats.items():
        children.setdefault(ppid, []).append(pid)
    roots = list(children.get(me, []))
    if stats[me][0] == 1:  # a PID namespace of the call's own: PID 1 adopts orphans, all of them the call's
        roots += [pid for pid in children.get(1, []) if pid != me]
    ticks, seen = sum(stats[me][3:5]), set()  # `me`'s ended children, whose time the kernel added to its own
    while roots:
        pid = roots.pop()
        if pid not in seen:
            seen.add(pid)
            ticks += sum(stats[pid][1:5])
            roots += children.get(pid, [])
    return ticks / os.sysconf("SC_CLK_TCK")
"""

# The zygote: one Python process started once, inside its own mount and PID namespaces. It builds a read-only root
# that holds only the interpreter, its standard library and the libraries they load, moves into it (pivot_root)
# and waits. For each call it forks a child that takes fresh mount, PID, network, IPC and UTS namespaces and a
# fresh /tmp, reads the code from the call's own socket, and runs it in a grandchild as "nobody". A fork of a
# waiting interpreter costs far less than starting one, and every call starts from the same clean state: the
# zygote never reads code itself, so nothing of one call can reach another through it.
_SANDBOX_ZYGOTE = r"""
import array, ctypes, json, os, resource, shutil, signal, socket, stat, struct, sys, time, traceback, types
exec(PROCESS_TREE_CPU)
cfg, libc = json.loads(sys.argv[1]), ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
control = socket.socket(fileno=cfg["control"])
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_NOATIME, MS_NODIRATIME = 1, 2, 4, 8, 32, 1024, 2048
MS_BIND, MS_MOVE, MS_REC, MS_RELATIME, MNT_DETACH = 4096, 8192, 16384, 1 << 21, 2
NEW_MOUNT, NEW_UTS, NEW_IPC, NEW_PID, NEW_NET = 0x20000, 0x4000000, 0x8000000, 0x20000000, 0x40000000
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_KEEPCAPS, PR_CAP_AMBIENT, NOBODY = 4, 24, 38, 8, 47, 65534
prctl = getattr(libc, "prctl", lambda *args: -1)

# The seccomp filter, in every mode: built once here in the zygote, handed to the kernel in each call's own process
# as the last step before the code runs (after namespaces, mounts, limits and the privilege drop; no_new_privs set
# first). It refuses, with EPERM, the kernel's interfaces no program of this kind needs and that have held many of
# its privilege-escalation bugs: tracing processes, mounts, namespaces (clone with any CLONE_NEW* flag; clone3 says
# ENOSYS, so that glibc falls back to clone, whose flags a filter can read), kexec, modules, bpf, perf events,
# keyrings, userfaultfd, io_uring, personality and file handles. Syscall numbers: (x86_64, aarch64).
SYSCALLS = dict(ptrace=(101, 117), process_vm_readv=(310, 270), process_vm_writev=(311, 271), mount=(165, 40),
                umount2=(166, 39), pivot_root=(155, 41), chroot=(161, 51), unshare=(272, 97), setns=(308, 268),
                kexec_load=(246, 104), kexec_file_load=(320, 294), bpf=(321, 280), perf_event_open=(298, 241),
                keyctl=(250, 219), add_key=(248, 217), request_key=(249, 218), userfaultfd=(323, 282),
                io_uring_setup=(425, 425), io_uring_enter=(426, 426), io_uring_register=(427, 427),
                init_module=(175, 105), finit_module=(313, 273), delete_module=(176, 106), personality=(135, 92),
                open_tree=(428, 428), move_mount=(429, 429), fsopen=(430, 430), fsconfig=(431, 431),
                fsmount=(432, 432), fspick=(433, 433), mount_setattr=(442, 442), open_by_handle_at=(304, 265),
                name_to_handle_at=(303, 264))
# The Landlock mode refuses more, what namespaces give the other modes' calls: any new socket (socketpair and pipes
# still work; the namespace mode's calls have an empty network of their own) and leaving the process group (so
# every process of the call is killed with it; the namespace mode's calls die with their PID namespace).
LANDLOCK_SYSCALLS = dict(socket=(41, 198), setsid=(112, 157), setpgid=(109, 154))
CLONE, CLONE3, CLONE_NEW_ANY = (56, 220), (435, 435), 0x7E020080  # any CLONE_NEW* flag
ARCH = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}.get(os.uname().machine)
SECCOMP = None  # (program, length), built before the zygote says it is ready
CALL_LIMITS = {}  # the call's wall-clock and CPU seconds, which each call brings (serve)

# Landlock, for where namespaces are refused (Docker's default seccomp profile, Ubuntu 24.04's AppArmor): it needs
# no privileges. Landlock (ABI 1+) lets this process open only the interpreter's read-only paths and its own
# folder; from ABI 4 it refuses TCP bind/connect, from ABI 6 signals and abstract sockets leaving the process tree.
def landlock_abi():
    return libc.syscall(444, None, 0, 1) if ARCH else -1  # landlock_create_ruleset(NULL, 0, VERSION)

def prepare_containment(read_only, read_write):  # once, in the zygote: the parts contain() hands the kernel
    # in each call: the Landlock ruleset's attribute and a rule per path (opened here)
    global LANDLOCK
    abi = landlock_abi()
    ok(0 if abi >= 1 else -1, "Landlock")
    fs = (1 << 13) - 1 | (abi >= 2 and 1 << 13) | (abi >= 3 and 1 << 14) | (abi >= 5 and 1 << 15)  # all it knows
    attr = struct.pack("<QQQ", fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)[:8 if abi < 4 else 16 if abi < 6 else 24]
    reading, file_rights = 1 | 4 | 8, 1 | 2 | 4 | (abi >= 3 and 1 << 14) | (abi >= 5 and 1 << 15)
    rules = []
    for path, rights in [(p, reading) for p in read_only] + [(p, 2 | 4) for p in read_write]:
        try:
            fd = os.open(path, os.O_PATH)
        except OSError:
            continue
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= file_rights  # a file takes only file rights
        rules.append(ctypes.create_string_buffer(struct.pack("<Qi", rights & fs, fd), 12))  # packed: u64, s32
    LANDLOCK = (ctypes.create_string_buffer(attr, len(attr)), fs, rules)

def contain(work):  # in a call's own process: Landlock (the prepared paths, `work` with every right)
    attr, fs, rules = LANDLOCK
    ruleset = libc.syscall(444, attr, ctypes.c_size_t(len(attr)), 0)
    ok(0 if ruleset >= 0 else -1, "landlock_create_ruleset")  # net and scope handled with no rule: refused
    fd = os.open(work, os.O_PATH)
    for rule in rules + [ctypes.create_string_buffer(struct.pack("<Qi", fs, fd), 12)]:
        ok(0 if libc.syscall(445, ruleset, 1, rule, 0) == 0 else -1, "landlock_add_rule")
    ok(0 if libc.syscall(446, ruleset, 0) == 0 else -1, "landlock_restrict_self")
    os.close(ruleset); os.close(fd)

def filter_syscalls():  # in a call's own process, the last step before the code runs (no_new_privs already set)
    program, length = SECCOMP
    fprog = struct.pack("HxxxxxxQ", length, ctypes.addressof(program))  # struct sock_fprog
    ok(prctl(22, 2, ctypes.c_char_p(fprog), 0, 0), "seccomp")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER

def seccomp_program(refused):
    which, audit_arch = ARCH
    LD, JEQ, JGE, JSET, RET, ALLOW, EPERM, ENOSYS, KILL = 0x20, 0x15, 0x35, 0x45, 0x06, 0x7FFF0000, 0x50001, 0x50026, 0x80000000
    program = [(LD, 4), ("jump", JEQ, audit_arch, None, "kill"), (LD, 0)]  # the architecture, then the number
    program += [("jump", JGE, 0x40000000, "kill", None)] if which == 0 else []  # x32 calls
    program += [("jump", JEQ, numbers[which], "eperm", None) for numbers in refused.values()]
    program += [("jump", JEQ, CLONE[which], "clone", None), ("jump", JEQ, CLONE3[which], "enosys", None),
                (RET, ALLOW), "clone", (LD, 16), ("jump", JSET, CLONE_NEW_ANY, "eperm", None), (RET, ALLOW),
                "eperm", (RET, EPERM), "enosys", (RET, ENOSYS), "kill", (RET, KILL)]  # clone3: glibc falls back
    labels, code = {}, [step for step in program if not isinstance(step, str)]
    for step in program:
        if isinstance(step, str):
            labels[step] = sum(not isinstance(s, str) for s in program[:program.index(step)])
    def offset(label, pc):
        return 0 if label is None else labels[label] - pc - 1
    data = b"".join(struct.pack("<HBBI", s[1], offset(s[3], pc), offset(s[4], pc), s[2]) if s[0] == "jump"
                    else struct.pack("<HBBI", s[0], 0, 0, s[1]) for pc, s in enumerate(code))
    return ctypes.create_string_buffer(data, len(data)), len(code)

def ok(result, what):
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")

def mount(src, dst, fstype=None, flags=0, data=None):
    ok(libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), flags, data and data.encode()),
       f"mount {dst}")

def bind_read_only(path, inside, device):
    mount(path, inside, None, MS_BIND | MS_REC)
    f = os.statvfs(path).f_flag  # keep the source's flags: a user namespace may not clear them
    kept = (f & 15) | (f & 1024 and MS_NOATIME) | (f & 2048 and MS_NODIRATIME) | (f & 4096 and MS_RELATIME)
    mount(None, inside, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept | (0 if device else MS_NODEV))

def add(stage, path, device=False):  # `path` at its own place inside, with the symlinks on the way to it
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        host = "/" + "/".join(parts[:i])
        if os.path.islink(host):  # e.g. /lib -> usr/lib: the same link inside, then what it points to
            if not os.path.lexists(stage + host):
                os.symlink(os.readlink(host), stage + host)
            return add(stage, os.path.join(os.path.realpath(host), *parts[i:]), device)
        if i < len(parts):
            os.makedirs(stage + host, exist_ok=True)
    if not os.path.lexists(stage + path):
        os.mkdir(stage + path) if os.path.isdir(path) else open(stage + path, "w").close()
        bind_read_only(path, stage + path, device)

def build_root(stage):
    mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for path in cfg["paths"]:
        add(stage, path)
    for path in ("/dev/null", "/dev/zero", "/dev/urandom"):
        add(stage, path, device=True)
    for path in cfg["hidden"]:  # site-packages inside the standard library: an empty folder
        mount("tmpfs", stage + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=755")
    for name in ("stdin", "stdout", "stderr"):
        os.symlink(f"/proc/self/fd/{('stdin', 'stdout', 'stderr').index(name)}", f"{stage}/dev/{name}")
    os.symlink("/proc/self/fd", f"{stage}/dev/fd")
    for path in ("/proc", "/tmp", "/dev/shm"):
        os.makedirs(stage + path, exist_ok=True)
    mount("/proc", stage + "/proc", None, MS_BIND | MS_REC)  # under each call's own /proc: user namespaces need it
    mount(None, stage, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(stage)
    pivot_root = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)  # syscall numbers; glibc has no wrapper
    if pivot_root and libc.syscall(pivot_root, b".", b".") == 0:
        ok(libc.umount2(b".", MNT_DETACH), "detach the old root")  # the host's tree is gone from this namespace
    else:
        mount(stage, "/", None, MS_MOVE)
        ok(libc.chroot(b"."), "chroot")
    os.chdir("/")

def run_code(path, source, stdin, output, work):  # the code's own process: give up everything, then run it as `python -I`
    for number, fd in ((0, os.open("/dev/null", os.O_RDONLY) if stdin is None else stdin), (1, output), (2, output)):
        os.dup2(fd, number)
    os.setsid()  # its own process group, which seccomp then keeps it in (Landlock mode): the call's end kills it
    if cfg["landlock"]:  # Landlock, while the prepared rules' descriptors are still open
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        contain(work)
    os.closerange(3, 1 << 16)  # no control socket, no result channel: the code cannot forge its own result
    os.chdir(work)
    for name, value in {**cfg["limits"], "RLIMIT_CPU": CALL_LIMITS["cpu"]}.items():
        limit, hard = getattr(resource, name), resource.getrlimit(getattr(resource, name))[1]
        soft, new_hard = value, value + (name == "RLIMIT_CPU")  # CPU: SIGXCPU at soft, SIGKILL a second later
        if hard != resource.RLIM_INFINITY:
            soft, new_hard = min(soft, hard), min(new_hard, hard)
        resource.setrlimit(limit, (soft, new_hard))
    if cfg["drop"]:  # root -> nobody: cannot write the caller's files, read its secrets or raise its limits
        prctl(PR_SET_KEEPCAPS, int(cfg["landlock"]), 0, 0, 0)
        os.setgroups([]); os.setgid(NOBODY); os.setuid(NOBODY)
        if cfg["landlock"]:  # keep one right, through exec too: to read the interpreter wherever it is installed
            read_search = 1 << 2  # (/root/...); Landlock still decides what may be read at all
            libc.capset(ctypes.byref((ctypes.c_uint32 * 2)(0x20080522, 0)),
                        ctypes.byref((ctypes.c_uint32 * 6)(read_search, read_search, read_search, 0, 0, 0)))
            prctl(PR_CAP_AMBIENT, 2, 2, 0, 0)  # PR_CAP_AMBIENT_RAISE CAP_DAC_READ_SEARCH
    elif hasattr(libc, "capset"):  # root of a user namespace: give up every capability, for good
        for cap in range(64):
            prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        libc.capset(ctypes.byref((ctypes.c_uint32 * 2)(0x20080522, 0)), ctypes.byref((ctypes.c_uint32 * 6)()))
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid programs (su, sudo) cannot give privileges back
    os.environ.clear()
    os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", LANG="C.UTF-8", HOME=work, TMPDIR=work)  # tempfile
    for number in (signal.SIGALRM, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    import builtins, site
    site.setquit(); site.sethelper()  # exit(), quit() and help(), as in `python -I`
    main = types.ModuleType("__main__")
    main.__file__, main.__builtins__ = path, builtins
    sys.modules["__main__"], sys.argv, sys.dont_write_bytecode = main, [path], True
    if SECCOMP:  # last, in every mode: the steps above may need what it refuses; from here on, so does the code
        try:
            filter_syscalls()
        except OSError as error:
            os.write(2, f"the sandbox could not filter system calls ({error})\n".encode())
            os._exit(1)
    rc = 0
    try:
        exec(compile(source, path, "exec"), main.__dict__)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 0 if e.code is None else (print(e.code, file=sys.stderr), 1)[1]
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # from the code's own frames on
        rc = 1
    for finish in (lambda: sys.modules["threading"]._shutdown() if "threading" in sys.modules else None,
                   lambda: sys.modules["atexit"]._run_exitfuncs() if "atexit" in sys.modules else None,
                   sys.stdout.flush, sys.stderr.flush):
        try:
            finish()
        except BaseException:
            pass
    os._exit(rc & 255)

def serve(connection, stdin, wall, cpu):  # one call, in a child of the zygote; `stdin`: a descriptor for the code, or None
    CALL_LIMITS.update(wall=wall, cpu=cpu)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if cfg["namespaces"]:
        ok(libc.unshare(NEW_MOUNT | NEW_PID | NEW_NET | NEW_IPC | NEW_UTS), "unshare")
        if os.fork():
            os._exit(0)  # the child is PID 1 of the new PID namespace: when it exits, all of the call's processes die
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        # The captured output: a file without a name on a tmpfs of its own, detached before the code runs, so the
        # code can neither open it again nor crowd it out by filling /tmp.
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['output'] + 2**16},nr_inodes=8,mode=700")
        output = os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
        ok(libc.umount2(b"/tmp", MNT_DETACH), "detach the output's tmpfs")
        for path, size in (("/tmp", cfg["tmp_bytes"]), ("/dev/shm", cfg["tmp_bytes"] // 4)):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},nr_inodes=4096,mode=1777")
        work = "/tmp"
    else:
        work = os.path.join(cfg["scratch"], os.urandom(8).hex())
        os.mkdir(work, 0o700)
        if cfg["drop"]:
            os.chown(work, NOBODY, NOBODY)
        output = os.open(os.path.join(work, ".output"), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.unlink(os.path.join(work, ".output"))  # a file without a name: the code cannot open it again
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # the code may not trace this process or open its files
    chunks = []
    while chunk := connection.recv(1 << 16):
        chunks.append(chunk)
    source, path = b"".join(chunks), os.path.join(work, "main.py")
    with open(path, "wb") as f:
        f.write(source)
    fd = connection.detach()
    pid = os.fork()
    if pid == 0:
        try:
            run_code(path, source, stdin, output, work)
        finally:
            os._exit(1)  # run_code ends with os._exit itself: this is only reached if it failed before the code ran
    # The call's limits, looked at every 0.1 s while it runs: CPU seconds of all its processes together (each also
    # holds RLIMIT_CPU alone), and the wall clock, a backstop for code that sleeps or blocks
    over, start, me = [], time.monotonic(), os.getpid()

    def look(*_):
        if time.monotonic() - start >= wall:
            over.append(124)  # the wall-clock backstop
        elif (process_tree_cpu(me) or 0) > cpu:
            over.append(128 + signal.SIGXCPU)  # what one process over its RLIMIT_CPU reports
        if over:
            signal.setitimer(signal.ITIMER_REAL, 0)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # it ended meanwhile

    signal.signal(signal.SIGALRM, look)
    signal.setitimer(signal.ITIMER_REAL, 0.1, 0.1)
    status = os.waitpid(pid, 0)[1]
    signal.setitimer(signal.ITIMER_REAL, 0)
    rc = over[0] if over else os.waitstatus_to_exitcode(status)
    if not cfg["namespaces"]:  # no PID namespace: kill what is left of the code's process group, remove its folder
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    socket.socket(fileno=fd).sendall(b"%d\n" % (128 - rc if rc < 0 else rc) + os.pread(output, cfg["output"], 0))

try:
    if cfg["seccomp"]:
        SECCOMP = seccomp_program({**SYSCALLS, **(LANDLOCK_SYSCALLS if cfg["landlock"] else {})})
    if cfg["namespaces"]:
        build_root(cfg["stage"])
    elif cfg["landlock"]:
        prepare_containment(cfg["paths"] + ["/dev/zero", "/dev/urandom"], ["/dev/null"])
    control.send(b"ready")
except Exception as e:
    control.send(f"{type(e).__name__}: {e}".encode())
    sys.exit(1)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # finished calls are reaped by the kernel
if not cfg["namespaces"]:  # a call's orphans come here when they end, and are reaped too (no PID 1 of their own)
    prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
while True:
    message, ancillary, _, _ = control.recvmsg(32, socket.CMSG_SPACE(8))
    if not message:
        break  # the caller is gone: so is this process, and with it (PID 1 of its namespace) every call
    fds = [fd for _, kind, data in ancillary if kind == socket.SCM_RIGHTS
           for fd in array.array("i", data[:len(data) - len(data) % 4])]  # the call's socket, then its stdin
    try:
        if fds and os.fork() == 0:
            control.close()
            try:
                _, wall, cpu = message.split()  # b"run WALL CPU": this call's limits, in whole seconds
                serve(socket.socket(fileno=fds[0]), fds[1] if len(fds) > 1 else None, int(wall), int(cpu))
            finally:
                os._exit(0)
    finally:
        for fd in fds:
            os.close(fd)
""".replace("exec(PROCESS_TREE_CPU)", _PROCESS_TREE_CPU)


def _sandbox_files():
    """What the sandbox's root holds besides devices: the interpreter, its standard library and the shared libraries
    they load (found by ldd), and the folders inside the standard library to show empty (site-packages)."""
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    stdlib, dynload = os.path.dirname(os.__file__), sysconfig.get_config_var("DESTSHARED")
    objects = [python, *glob.glob(os.path.join(dynload or stdlib, "*.so"))]
    try:
        ldd = subprocess.run(["ldd", *objects], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        ldd = ""
    paths = {python, stdlib, dynload, "/etc/ld.so.cache", *re.findall(r"(?:=> |^\s+)(/\S+) \(0x", ldd, re.MULTILINE)}
    libc = [os.path.dirname(p) for p in paths if p and "/libc.so" in p]
    paths |= {os.path.join(d, "libgcc_s.so.1") for d in libc}  # loaded by glibc when a thread exits
    hidden = [os.path.join(stdlib, d) for d in ("site-packages", "dist-packages")]
    return python, sorted(p for p in paths if p and os.path.exists(p)), [d for d in hidden if os.path.isdir(d)]


class _Sandbox:
    """A running zygote (see _SANDBOX_ZYGOTE) in one containment mode, and the socket that asks it for calls.
    `seccomp`: whether each call runs under the seccomp filter (x86_64 and aarch64; off only to measure its cost)."""

    def __init__(self, prefix, namespaces, drop, landlock=False, seccomp=True):
        self.namespaces, self.drop, self.landlock = namespaces, drop, landlock
        self.mode = "namespaces" if namespaces else "landlock" if landlock else "plain"
        self.seccomp = bool(seccomp) and os.uname().machine in ("x86_64", "aarch64")  # the filter's architectures
        self.owner = os.getpid()  # the process that closes it at exit (not a fork of it)
        python, paths, hidden = _sandbox_files()
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.scratch = tempfile.mkdtemp(prefix="run_python_")  # the root's mount point; call folders without namespaces
        os.chmod(self.scratch, 0o711)
        limits = {"RLIMIT_AS": PYTHON_MEMORY_BYTES, "RLIMIT_FSIZE": PYTHON_FILE_BYTES,
                  "RLIMIT_CORE": 0, **({"RLIMIT_NPROC": PYTHON_MAX_PROCESSES} if drop else {})}
        cfg = {"control": theirs.fileno(), "namespaces": namespaces, "landlock": landlock, "drop": drop,
               "seccomp": self.seccomp, "stage": self.scratch,
               "scratch": self.scratch, "paths": paths, "hidden": hidden, "limits": limits,
               "tmp_bytes": PYTHON_TMP_BYTES, "output": PYTHON_FILE_BYTES}
        self.process = subprocess.Popen(  # -S: no site-packages; -u: output reaches the file as it is printed
            [*prefix, python, "-I", "-S", "-u", "-c", _SANDBOX_ZYGOTE, json.dumps(cfg)], pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}, start_new_session=True)
        theirs.close()
        self.control.settimeout(60)
        try:
            self.status = self.control.recv(4096).decode("utf-8", "replace") or "the zygote exited"
        except OSError as e:
            self.status = f"no answer from the zygote ({e})"
        self.control.settimeout(None)

    def run(self, code, stdin=b"", wall=None, cpu=None):
        """(exit status, output, whether the output hit the file-size limit) of one call; `stdin` is what the
        code reads from standard input (bytes, at most PYTHON_FILE_BYTES); `wall` and `cpu`: the call's limits in
        seconds (PYTHON_WALL_S and PYTHON_CPU_S unless given)."""
        wall, cpu = (max(1, math.ceil(value)) for value in (wall or PYTHON_WALL_S, cpu or PYTHON_CPU_S))
        if len(stdin) > PYTHON_FILE_BYTES:
            raise ValueError(f"stdin too long ({len(stdin)} bytes, limit {PYTHON_FILE_BYTES})")
        ours, theirs = socket.socketpair()  # this call's own channel: code in, status and output back
        # stdin travels as a descriptor of an in-memory file: the sandbox's processes never hold it in their memory,
        # so a process the code forks before reading its stdin has none of it
        stdin_file = os.fdopen(os.memfd_create("stdin"), "w+b") if stdin else None
        with ours:
            try:
                if stdin_file:
                    stdin_file.write(stdin)
                    stdin_file.flush()
                    stdin_file.seek(0)
                fds = [theirs.fileno(), *([stdin_file.fileno()] if stdin_file else [])]
                self.control.sendmsg([b"run %d %d" % (wall, cpu)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            finally:
                theirs.close()
                if stdin_file:
                    stdin_file.close()
            ours.settimeout(wall + 10)  # a backstop: the sandbox enforces the limit itself
            try:
                ours.sendall(code.encode("utf-8", "surrogatepass"))
                ours.shutdown(socket.SHUT_WR)
                reply = bytearray()
                while len(reply) < PYTHON_FILE_BYTES + 16 and (chunk := ours.recv(1 << 16)):
                    reply += chunk
            except socket.timeout:
                return 124, "", False
        header, newline, output = bytes(reply).partition(b"\n")
        if not newline:
            raise RuntimeError("the sandbox ended the call without a result")
        return int(header), output.decode("utf-8", "replace"), len(output) >= PYTHON_FILE_BYTES

    def close(self):
        self.control.close()  # the zygote exits when its socket closes
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


SANDBOX_MODES = ("namespaces", "landlock", "plain")  # strongest first; GRPO_SANDBOX=<mode> forces one


def _start_sandbox(mode: str, failures: list, seccomp: bool = True):
    """A started sandbox in `mode` that can import a module and print, or None (the reasons go to `failures`);
    `seccomp=False` only to measure what the filter costs (benchmarks/bench_sandbox.py)."""
    root, unshare = os.geteuid() == 0, shutil.which("unshare")
    ns = ["--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
    candidates = {"namespaces": [([unshare, *ns], True, root), ([unshare, "--user", "--map-root-user", *ns], True,
                                                                 False)] if unshare else [],
                  # plain, as root: as "nobody" first; where nobody cannot read the interpreter (one installed
                  # under /root, say), as root, which its warning says
                  "landlock": [([], False, root, True)], "plain": [([], False, root)] + [([], False, False)] * root}[mode]
    for candidate in candidates:
        sandbox = _Sandbox(*candidate, seccomp=seccomp)
        try:
            if sandbox.status == "ready" and sandbox.run("import ast\nprint('ok')")[:2] == (0, "ok\n"):
                return sandbox
            failures.append(sandbox.status if sandbox.status != "ready" else
                            f"{mode}{' as nobody' if sandbox.drop else ''}: the probe call failed")
        except (OSError, RuntimeError, ValueError) as error:
            failures.append(f"{mode}: {error}")
        sandbox.close()
    return None


def _forced_mode():
    """The mode GRPO_SANDBOX names ('' when unset); any other value raises a one-line RuntimeError naming the modes."""
    forced = os.environ.get("GRPO_SANDBOX", "").strip().lower()
    if forced and forced not in SANDBOX_MODES:
        raise RuntimeError(f"GRPO_SANDBOX={forced!r}: use one of {', '.join(SANDBOX_MODES)}, or unset it")
    return forced


def _sandbox_mode():
    """The running sandbox, started on first use in the strongest mode that works here (SANDBOX_MODES, in order),
    or in the mode the GRPO_SANDBOX environment variable names (an error if that mode cannot start here)."""
    global _SANDBOX
    with _SANDBOX_LOCK:
        if _SANDBOX is None or _SANDBOX.process.poll() is not None:
            forced = _forced_mode()
            sandbox, failures = None, []
            for mode in [forced] if forced else SANDBOX_MODES:
                sandbox = _start_sandbox(mode, failures)
                if sandbox is not None:
                    break
            if sandbox is None:
                raise RuntimeError((f"GRPO_SANDBOX={forced}: that mode cannot start here" if forced else
                                    "run_python: no sandbox mode can start here") + f" ({'; '.join(failures)[:300]})")
            _SANDBOX = sandbox
            print(f"run_python: sandbox mode {sandbox.mode}{' (forced by GRPO_SANDBOX)' if forced else ''}"
                  + (": Landlock + seccomp, no namespaces here (the code reads only the interpreter's files, "
                     "writes only its own folder, opens no socket)" if sandbox.mode == "landlock" else "")
                  + ("" if sandbox.seccomp else f"; no seccomp filter on {os.uname().machine}"), file=sys.stderr)
            if sandbox.mode == "plain":
                warnings.warn("run_python: no mount, PID or network namespace here: the code can read this machine's "
                              "files, reach the network, and background processes that call setsid() can outlive "
                              "the call" + ("" if os.geteuid() != 0 or sandbox.drop else
                                            f"; it runs as root, since the user nobody cannot read this Python "
                                            f"({sys.executable}): install Python where every user can read it "
                                            f"(e.g. under /usr or /opt) to run the code as nobody"))
    return _SANDBOX


def _run_in_sandbox(code, stdin=b"", wall=None, cpu=None):
    """Run `code` once, reading `stdin`: (exit status, output, whether the output hit the file-size limit)."""
    try:
        return _sandbox_mode().run(code, stdin, wall, cpu)
    except (BrokenPipeError, ConnectionError):  # the zygote died (killed from outside): start another, once
        return _sandbox_mode().run(code, stdin, wall, cpu)


def _close_at_exit():
    """The running sandbox's zygote stops, and its scratch folder goes, when the process that started it exits."""
    if _SANDBOX is not None and _SANDBOX.owner == os.getpid():
        _SANDBOX.close()


os.register_at_fork(after_in_child=lambda: globals().update(_SANDBOX_LOCK=threading.Lock()))
atexit.register(_close_at_exit)


# ---- run_python
# What run_python contains, and what not (_sandbox_mode picks the strongest mode that works on the machine):
# - Where `unshare` works (as root, or with unprivileged user namespaces), each call gets new mount, PID, network,
#   IPC and UTS namespaces. Its filesystem is a read-only root holding only the interpreter, its standard library
#   (site-packages empty: no installed packages), the shared libraries they load, /dev/null, /dev/zero,
#   /dev/urandom and a private /proc; no repository, data, home or host /tmp. /tmp (its working directory, 64 MB)
#   and /dev/shm (16 MB) are fresh tmpfs mounts of that call alone: nothing written survives it or reaches another
#   call. No network at all (a loopback that is down, its own for each call). The code sees and can signal only
#   its own processes, and all of them die with the call, setsid() daemons and double forks included. Started as
#   root, the code runs as "nobody" with no_new_privs and at most 64 processes; in a user namespace it keeps no
#   capabilities. It has no descriptor of the sandbox's: its output goes to a file with no name, and the status is
#   reported by a process it cannot trace or signal.
# - Always: 5 s of CPU, all the call's processes together (each also holds RLIMIT_CPU), so that a busy machine
#   does not change what a call returns; 25 s of wall clock as a backstop for code that sleeps or blocks; 512 MB
#   address space, 1 MB per file written (its captured output included; 2,000 characters come back), no core dumps, an empty environment (PATH and LANG only), `python -I` semantics,
#   and every call a fork of the same clean interpreter (the code never sees another call's code or state).
#   And (x86_64, aarch64) a seccomp filter, put on last before the code runs with no_new_privs, that refuses with
#   EPERM: ptrace, process_vm_readv/writev, mount, umount2, pivot_root, chroot, unshare, setns, clone with any
#   CLONE_NEW* flag (clone3: ENOSYS, glibc falls back to clone), the new mount API (open_tree, move_mount, fsopen,
#   fsconfig, fsmount, fspick, mount_setattr), kexec_load, kexec_file_load, init_module, finit_module,
#   delete_module, bpf, perf_event_open, keyctl, add_key, request_key, userfaultfd, io_uring_setup/enter/register,
#   personality, open_by_handle_at and name_to_handle_at; a call of another architecture (x32) kills the process.
#   Threads, fork, subprocess, pipes, socketpair and (where /dev/shm is writable) multiprocessing still work.
# - Where namespaces are refused (Docker's default seccomp profile, Ubuntu 24.04's AppArmor) but the kernel has
#   Landlock (Linux 5.13 on): Landlock + seccomp, no privileges needed. The code opens only the interpreter's files
#   (read-only), its own fresh folder (its working directory, removed after the call) and /dev/null; the filter
#   also refuses, in this mode only, any new socket (pipes and socketpair work; multiprocessing's locks do not:
#   no /dev/shm) and leaving its process group (setsid, setpgid), so every process of the call is killed with
#   it. Started as root, it runs as "nobody" (at most 64 processes),
#   keeping only the right to read the interpreter wherever it is installed. Not contained there: whether a host
#   path exists, and its size and owner (stat works everywhere); system facts (uname, CPU count, load); and before
#   Linux 6.12 (Landlock ABI 6), signals to other processes of the same user, such as a concurrent call's.
# - With neither (with a warning): the code can read this machine's files, the network is reachable, daemons
#   that call setsid() can outlive the call, files written outside the working directory stay (each at most 1 MB),
#   other processes of the same user are visible in /proc, and the code runs as root where "nobody" cannot.
# - GRPO_SANDBOX=namespaces|landlock|plain forces a mode (an error if it cannot start); the mode in use is printed
#   once. benchmarks/bench_sandbox.py measures what each mode contains here, and what a call costs.
# - Never: the kernel is shared (an exploit escapes); disk, memory and CPU bandwidth are not reserved. This is for
#   a model's code with hidden tests and scratch arithmetic, not for hostile code: for untrusted workloads use a
#   real sandbox (gVisor, Firecracker microVMs, nsjail, or a locked-down container per call).
def run_python(code: str) -> str:
    """Run a short Python program in a throwaway sandbox and return what it prints (stdout and stderr).

    Limits: 5 seconds of CPU, 512 MB of memory, the standard library only, no network; files it writes are discarded,
    so print what you need.

    Args:
        code: The Python source to run, e.g. "print(sum(range(10)))".

    Returns:
        The printed output (at most 2000 characters), or "Error: " with the reason and any output.
    """
    if not isinstance(code, str):
        return "Error: code must be a string of Python source"
    if len(code) > PYTHON_MAX_CODE_CHARS:
        return f"Error: code too long ({len(code)} characters, limit {PYTHON_MAX_CODE_CHARS})"
    try:
        rc, output, flooded = _run_in_sandbox(code)
    except Exception as e:  # e.g. no space left for the temp dir: report it, never crash the trainer
        return f"Error: could not run the code ({type(e).__name__}: {e})"
    if len(output) > PYTHON_OUTPUT_CHARS:  # keep the start and the end, where a traceback's last line is
        half = PYTHON_OUTPUT_CHARS // 2
        output = f"{output[:half]}\n... [{len(output) - 2 * half} characters cut] ...\n{output[-half:]}"
    if rc == 0 and not flooded:
        return output or "(no output: print the values you need)"
    signals = {int(s): s.name for s in signal.valid_signals() if isinstance(s, signal.Signals)}
    if flooded:  # Python ignores SIGXFSZ: its writes fail instead, and so does printing the traceback
        reason = f"the output exceeded the size limit ({PYTHON_FILE_BYTES // 2**20} MB)"
    elif rc == 124:
        reason = f"timed out (over {PYTHON_WALL_S:g} s of wall clock: the code sleeps or waits)"
    elif rc == 128 + signal.SIGXCPU:
        reason = f"timed out (over {PYTHON_CPU_S:g} s of CPU)"
    elif rc - 128 in signals:  # SIGKILL: the hard CPU limit; SIGSEGV: often a C extension out of memory
        reason = f"killed by {signals[rc - 128]}"
    else:
        reason = f"exit status {rc}"
    return f"Error: {reason}\n{output}".rstrip()


# ---- the hidden tests
# Why this harness cannot be fooled by the code it tests. It runs as one sandboxed program with two processes:
# - This one is trusted: it reads the task (on stdin, never in its source, which the code could read in /tmp),
#   runs the tests, and prints the one result line. It is not dumpable: no other process of the same user may
#   read its memory or open its files.
# - The solution runs in a worker whose stdout and stderr are /dev/null: a copy of this process made before it read
#   the task (the sandbox passes stdin as a descriptor, so no process holds the task before this one reads it), or
#   after a crash a fresh interpreter. The tests call `candidate`, a stand-in that sends each call's arguments to
#   the worker, which calls the solution and sends back the return value as plain data (numbers, strings, bytes,
#   lists, tuples, dicts, sets, None) by exact type. This process rebuilds the value and compares it here.
# So: exiting (sys.exit, os._exit), raising SystemExit or KeyboardInterrupt, or crashing fails the case; an object
# whose __eq__ always says True (or a subclass of int or str) never reaches a comparison; patching builtins,
# AssertionError or unittest changes only the worker; printing "passed" reaches /dev/null; the tests and the
# expected values are never in the worker, its files or its memory, and a caller's frame holds only the arguments.
# A case that runs out of time fails, and the cases after it are skipped (failed): a slow solution costs one
# time-out, not one per case. Time is CPU time, of the solution's processes and those they start (TEST_CASE_CPU_S,
# TESTS_CPU_S), so that a busy machine does not change a verdict; the wall clock is only a backstop (TEST_WALL_FACTOR). Killing or stopping this process leaves no result line: every case fails (and that
# result is not cached: run_hidden_tests runs the solution again when asked again).
# What it cannot do: show the tests a solution's changes to its arguments (they see copies), or compare anything but
# plain data. A task that needs either fails its own reference solution at load time and is dropped, said so.
#
# Three layouts, told apart by the entry point, with the same guarantees:
# - "name": a function the tests call by name, or as check(candidate) (HumanEval, MBPP).
# - "Solution().name": a method of a class (LeetCode). The tests' `Solution()` is a stand-in whose `name` is the
#   candidate above; the worker calls the method of a fresh instance of the solution's class for each call, so
#   what the tests compare is still the method's return value, as plain data.
# - STDIN_PROGRAM ("<stdin>"): a program that reads stdin and prints the answer (CodeContests, APPS). The tests are
#   a JSON object {"inputs": [...], "outputs": [...], "float_tolerance": 0}. The worker only compiles the program,
#   then forks one process per case, whose stdin is a pipe holding that case's input alone and whose stdout is a
#   pipe back to this process; this process compares what it printed when it exited: whitespace-normalised
#   tokens, numbers within float_tolerance if one is given. A case passes only with exit status 0: a crash, an
#   exit early, output written after the program ended, a visible example's output printed regardless of the
#   input, all fail. The expected outputs stay in this process: never in a file, an argument or a worker.
STDIN_PROGRAM = "<stdin>"
_HIDDEN_TESTS_HARNESS = r'''
import ast, builtins, ctypes, json, os, select, signal, socket, sys, time, types
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
STDIN_PROGRAM = {STDIN_PROGRAM!r}

CODEC = r"""
def encode(x, depth=0):  # plain data only, by exact type: subclasses (and their __eq__) do not get through
    kind = type(x)
    if depth > 100:
        raise ValueError("nested too deeply")
    if x is None or kind in (bool, str):
        return x
    if kind is int:
        return ["int", str(x)]
    if kind is float:
        return ["float", repr(x)]
    if kind is complex:
        return ["complex", repr(x.real), repr(x.imag)]
    if kind is bytes:
        return ["bytes", x.hex()]
    if kind in (list, tuple, set, frozenset):
        return [kind.__name__, [encode(v, depth + 1) for v in x]]
    if kind is dict:
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]]
    raise TypeError(f"returned a {kind.__name__}: only plain data (numbers, strings, lists, tuples, dicts, sets) is compared")

def decode(x):
    if x is None or type(x) in (bool, str):
        return x
    kind, *rest = x
    if kind == "int":
        return int(rest[0])
    if kind == "float":
        return float(rest[0])
    if kind == "complex":
        return complex(float(rest[0]), float(rest[1]))
    if kind == "bytes":
        return bytes.fromhex(rest[0])
    if kind in ("list", "tuple", "set", "frozenset"):
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](decode(v) for v in rest[0])
    if kind == "dict":
        return {decode(k): decode(v) for k, v in rest[0]}
    raise ValueError(f"not plain data: {kind!r}")
"""
exec(CODEC)

WORKER = r"""
import json, math, os, resource, signal, socket, sys, time
sys.set_int_max_str_digits(0)
requests, replies = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
null = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
exec(CODEC)

def send(message):
    replies.write(json.dumps(message).encode() + b"\n")
    replies.flush()

def text(error):
    try:
        return str(error)[:300]
    except BaseException:
        return ""

def limit_cpu(seconds, per_case):
    # This process stops after `seconds` more CPU seconds: the kernel's RLIMIT_CPU, which the code cannot raise
    # (SIGXCPU, then SIGKILL a second later; whole seconds), and per case a SIGPROF timer (exact, the code could reset it).
    used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    soft, hard = math.ceil(used + seconds) + 1, resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1 if hard == resource.RLIM_INFINITY else min(soft + 1, hard)))
    if per_case:
        signal.setitimer(signal.ITIMER_PROF, seconds)

def run_program(setup, program, stdin, stdout, cpu):  # one test case of a program, in its own process
    limit_cpu(cpu, per_case=True)
    os.dup2(stdin, 0)
    os.dup2(stdout, 1)
    os.closerange(3, 1 << 16)
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", closefd=False)
    main, status = {"__name__": "__main__", "__builtins__": __builtins__}, 0
    try:
        exec(setup, main)
        exec(program, main)
    except SystemExit as error:
        status = error.code if type(error.code) is int else 0 if error.code is None else 1
    except BaseException:
        status = 1
    for finish in (lambda: sys.modules["threading"]._shutdown() if "threading" in sys.modules else None,
                   lambda: sys.modules["atexit"]._run_exitfuncs() if "atexit" in sys.modules else None,
                   sys.stdout.flush):
        try:
            finish()
        except BaseException:
            status = status or 1
    os._exit(status & 255)

job = json.loads(requests.readline())
limit_cpu(job["solution_cpu"], per_case=False)  # all of the solution's cases, in this process
namespace = {"__name__": "__solution__"}
owner, _, method = job["entry_point"].partition("().")  # "Solution().twoSum": a method of a class
try:
    if job["entry_point"] == STDIN_PROGRAM:  # compiled here, run only in the processes forked below
        setup, program = (compile(job[key], f"<{key}>", "exec") for key in ("setup", "solution"))
    else:
        exec(compile(job["setup"], "<prompt>", "exec"), namespace)
        namespace.pop(owner, None)  # the prompt's stub: the solution must define the function itself
        signal.setitimer(signal.ITIMER_PROF, job["case_cpu"])  # what the solution runs as it loads counts too
        exec(compile(job["solution"], "<solution>", "exec"), namespace)
        signal.setitimer(signal.ITIMER_PROF, 0)
        function = namespace.get(owner)
        if method and callable(function) and callable(getattr(function, method, None)):
            function = lambda *args, _new=function, **kwargs: getattr(_new(), method)(*args, **kwargs)
        elif method or not callable(function):
            raise NameError(f"the solution does not define {job['entry_point']}()")
except BaseException as error:
    send(["load_error", f"{type(error).__name__}: {text(error)}"])
    os._exit(0)
send(["ready"])
if job["entry_point"] == STDIN_PROGRAM:  # per case: its stdin and stdout pipes arrive on fd 3; a process runs it
    cases = socket.socket(fileno=3)
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(cases, 16, 2)
        except OSError:
            os._exit(0)
        if len(fds) != 2:
            os._exit(0)
        pid = None
        for wait in range(50):  # the sandbox's process limit is shared
            try:
                pid = os.fork()
                break
            except BlockingIOError:
                time.sleep(0.05)
        if pid == 0:
            run_program(setup, program, *fds, job["case_cpu"])
        for fd in fds:
            os.close(fd)
        if pid is None:
            send(["raise", "Failed", "no process slot for the program (the sandbox's process limit)"])
            continue
        send(["started", pid])
        send(["exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])])
while line := requests.readline():
    try:
        args, kwargs = json.loads(line)
        signal.setitimer(signal.ITIMER_PROF, job["case_cpu"])  # SIGPROF ends this process: the harness says why
        value = function(*decode(args), **decode(kwargs))
        signal.setitimer(signal.ITIMER_PROF, 0)
        result = ["ok", encode(value)]
    except BaseException as error:
        signal.setitimer(signal.ITIMER_PROF, 0)
        result = ["raise", type(error).__name__, text(error)]
    send(result)
os._exit(0)
""".replace("exec(CODEC)", CODEC).replace("STDIN_PROGRAM", repr(STDIN_PROGRAM))


class Failed(Exception):
    """The solution failed this call: it raised, crashed, ran out of time or returned something not plain data."""


POLL_S = 0.05
last_look = 0.0
exec(PROCESS_TREE_CPU)


def solution_cpu():
    """CPU seconds the solution's processes have used (see PROCESS_TREE_CPU): this process's descendants, and in a PID
    namespace of the call's own the orphans its PID 1 adopted. None in the Landlock mode: there each process's own
    limits stop it."""
    return process_tree_cpu(os.getpid())


def check_limits():
    """Raise Failed when the case is over a limit: the wall-clock backstop (looked at on every call), the case's
    CPU seconds or the solution's (every POLL_S at most: reading /proc costs)."""
    global last_look
    now = time.monotonic()
    if now >= case_deadline:
        raise Failed(f"timed out (over {case_wall:g} s of wall clock)" if now < deadline else
                     f"timed out (the solution's {deadline_wall:g} s of wall clock are spent)")
    if now - last_look < POLL_S:
        return
    last_look = now
    used = solution_cpu()
    if used is not None and cpu_at_case is not None and used - cpu_at_case > job["case_cpu"]:
        raise Failed(CASE_CPU_OUT)
    if used is not None and cpu_at_start is not None and used - cpu_at_start > job["solution_cpu"]:
        raise Failed(SOLUTION_CPU_OUT)


class Worker:
    """The solution's process, which loads the solution and then calls it when asked: a copy of this process made
    before the task was read (fast), or after that a fresh interpreter (exec: none of this process's memory)."""

    def __init__(self, fresh):
        request_read, self.requests = os.pipe()
        self.replies, reply_write = os.pipe()
        self.cases, cases = socket.socketpair()  # a program's test cases: each one's stdin and stdout pipes
        for wait in range(50):  # the sandbox's process limit is shared: another call's fork bomb may hold it a while
            try:
                self.pid = os.fork()
                break
            except BlockingIOError:
                time.sleep(0.05)
        else:
            raise Failed("no process slot for the solution (the sandbox's process limit)")
        if self.pid == 0:
            try:
                os.dup2(request_read, 0)  # in place of stdin, which the task is read from
                os.dup2(reply_write, 1)
                os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
                os.dup2(cases.fileno(), 3)
                os.closerange(4, 1 << 16)
                if fresh:
                    os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", WORKER])
                exec(WORKER, {"__name__": "__worker__"})
            finally:
                os._exit(127)
        os.close(request_read)
        os.close(reply_write)
        cases.close()
        os.set_blocking(self.requests, False)
        self.buffer, self.reply, self.ended = b"", None, False

    def load(self):
        self.send({key: job[key] for key in ("setup", "solution", "entry_point", "case_cpu", "solution_cpu")})
        self.reply = self.receive()

    def send(self, message):
        data = json.dumps(message).encode() + b"\n"
        while data:
            if not select.select([], [self.requests], [], POLL_S)[1]:
                check_limits()
                continue
            try:
                data = data[os.write(self.requests, data):]
            except OSError:
                raise Failed("the solution's process died") from None

    def receive(self):
        while b"\n" not in self.buffer:
            if not select.select([self.replies], [], [], POLL_S)[0]:
                check_limits()
                continue
            chunk = os.read(self.replies, 1 << 16)
            if not chunk:
                raise Failed(self.why_it_ended())
            self.buffer += chunk
            if len(self.buffer) > job["reply_bytes"]:
                raise Failed("returned too much data")
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def run_program(self, data):
        """(exit status, stdout) of the program run once on `data` as its stdin, in a process of its own."""
        stdin, feed = os.pipe()
        output, stdout = os.pipe()
        try:
            socket.send_fds(self.cases, [b"run"], [stdin, stdout])
        except OSError:
            raise Failed("the solution's process died") from None
        finally:
            os.close(stdin)
            os.close(stdout)
        os.set_blocking(feed, False)
        printed, pid, status, writing = b"", None, None, [feed] if data else []
        if not data:
            os.close(feed)
        try:
            while status is None:
                ready, writable, _ = ([self.replies], [], None) if b"\n" in self.buffer else select.select(
                    [output, self.replies], writing, [], POLL_S)  # (a reply already read, or wait)
                try:
                    check_limits()
                except Failed:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (OSError, TypeError):  # gone already, or never started
                        pass
                    raise
                if writable:
                    try:
                        data = data[os.write(feed, data[:1 << 16]):]
                    except OSError:  # the program stopped reading: what it read is what it got
                        data = b""
                    if not data:
                        os.close(feed)
                        writing = []
                if output in ready:
                    printed += os.read(output, 1 << 16)
                    if len(printed) > job["reply_bytes"]:
                        raise Failed("printed too much")
                if self.replies in ready:
                    reply = self.receive()
                    if reply[0] == "raise":
                        raise Failed(reply[2])
                    pid, status = (reply[1], None) if reply[0] == "started" else (pid, reply[1])
            os.set_blocking(output, False)
            try:  # what is left in the pipe; what a process it left behind writes later does not count
                while chunk := os.read(output, 1 << 16):
                    printed += chunk
                    if len(printed) > job["reply_bytes"]:
                        raise Failed("printed too much")
            except BlockingIOError:
                pass
        finally:
            os.close(output)
            if writing:
                os.close(feed)
        return status, printed.decode("utf-8", "replace")

    def why_it_ended(self):
        """Why the solution's process closed its replies: its CPU limits, or it exited (or crashed)."""
        for wait in range(100):
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.ended = True
                if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGPROF:
                    return CASE_CPU_OUT
                if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
                    return SOLUTION_CPU_OUT
                break
            time.sleep(0.01)
        return "the solution's process exited"

    def close(self):
        if not self.ended:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(self.pid, 0)
        os.close(self.requests)
        os.close(self.replies)
        self.cases.close()


try:
    worker = Worker(fresh=False)  # made now, while this process holds nothing of the task
except Failed:
    worker = None  # no process slot yet: a fresh one is made when the tests first call the solution
job = json.loads(sys.stdin.buffer.read())
sys.stdin.close()
sys.set_int_max_str_digits(0)
stop, deadline = None, time.monotonic() + job["solution_cpu"] * job["wall_factor"]
case_deadline, case_wall = deadline, job["case_cpu"] * job["wall_factor"]
deadline_wall = job["solution_cpu"] * job["wall_factor"]
CASE_CPU_OUT = f"timed out (over {job['case_cpu']:g} s of CPU)"
SOLUTION_CPU_OUT = f"timed out (the solution's {job['solution_cpu']:g} s of CPU are spent)"
cpu_at_start = cpu_at_case = solution_cpu()


def in_worker(call):
    """call(worker) with the solution loaded in a worker; a worker that crashed is replaced for the next case."""
    global worker, stop
    if stop:
        raise Failed(stop)
    try:
        if worker is None:
            worker = Worker(fresh=True)
        if worker.reply is None:
            worker.load()
            if worker.reply[0] != "ready":
                stop = f"the solution did not load: {worker.reply[1]}"
                raise Failed(stop)
        return call(worker)
    except Failed as error:
        if "timed out" in str(error):
            stop = "skipped: an earlier case timed out"
        if worker is not None:
            worker.close()
            worker = None  # crashed: the next case gets a fresh worker
        raise
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as error:
        raise Failed(f"the solution's process sent an unreadable reply ({type(error).__name__})") from None


def candidate(*args, **kwargs):
    """The solution's function, as the tests call it: the call itself runs in the worker."""
    reply = in_worker(lambda w: (w.send([encode(list(args)), encode(dict(kwargs))]), w.receive())[1])
    try:
        if reply[0] == "ok":
            return decode(reply[1])
        name, message = str(reply[1]), str(reply[2])
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as error:
        raise Failed(f"the solution's process sent an unreadable reply ({type(error).__name__})") from None
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):  # a test may expect, e.g., a ValueError
        raise kind(message)
    raise Failed(f"{name}: {message}")  # SystemExit, KeyboardInterrupt, ...


def is_case(node):
    """A test case: a statement with an assert in it (`assert True`, which cannot fail, does not count)."""
    return any(isinstance(n, ast.Assert) and not (isinstance(n.test, ast.Constant) and n.test.value)
               for n in ast.walk(node))


def why(error):
    if isinstance(error, AssertionError) and not str(error):
        return "AssertionError: a test failed"
    return (error.args[0] if isinstance(error, Failed) else f"{type(error).__name__}: {error}")[:job["error_chars"]]


def tokens(text):
    """What a program's output is compared by: the words of each line that is not blank."""
    return [line.split() for line in text.splitlines() if line.strip()]


def same_output(got, expected, tolerance):
    got, expected = tokens(got), tokens(expected)
    if got == expected or not tolerance or [len(line) for line in got] != [len(line) for line in expected]:
        return got == expected
    for a, b in zip(sum(got, []), sum(expected, [])):
        try:
            if a != b and not abs(float(a) - float(b)) <= tolerance * max(1.0, abs(float(b))):
                return False
        except ValueError:  # not numbers: only the same word matches
            return False
    return True


def show(text):
    return repr(text if len(text) <= 40 else text[:40] + "...")


def program_case(data, expected, tolerance):
    """One case of a program: its output for `data` on stdin, compared here with the expected output."""
    global stop
    status, printed = in_worker(lambda w: w.run_program(data.encode()))
    if status in (-signal.SIGPROF, -signal.SIGXCPU, -signal.SIGKILL):  # its CPU limits (run_program's)
        stop = "skipped: an earlier case timed out"
        raise Failed(CASE_CPU_OUT)
    if status != 0:
        raise Failed(f"exit status {status}" if status > 0 else f"killed by signal {-status}")
    if not same_output(printed, expected, tolerance):
        raise Failed(f"wrong output: printed {show(printed.strip())}, expected {show(expected.strip())}")


namespace = {"__name__": "__tests__"}
passed, errors, harness_error = [], [], None
owner, _, method = job["entry_point"].partition("().")
cases = []  # (run the case, whether it counts): a program's input/output pairs, or the tests' statements
try:
    if job["entry_point"] == STDIN_PROGRAM:
        tests = json.loads(job["tests"])
        inputs, outputs, tolerance = tests["inputs"], tests["outputs"], float(tests.get("float_tolerance") or 0)
        if len(inputs) != len(outputs) or not all(type(x) is str for x in inputs + outputs):
            raise ValueError("the tests need as many outputs as inputs, all strings")
        cases = [(lambda data=data, expected=expected: program_case(data, expected, tolerance), True)
                 for data, expected in zip(inputs, outputs)]
    else:
        tree = ast.parse(job["tests"])
        check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
        exec(compile(job["setup"], "<prompt>", "exec"), namespace)  # e.g. helper functions the tests call
        # the name the tests call: the function, or for a method its class, whose instances' method is the candidate
        namespace[owner] = (lambda *args, **kwargs: types.SimpleNamespace(**{method: candidate})) if method else candidate
        if check is not None:  # HumanEval's layout: check(candidate) holds the cases
            setup, statements = [n for n in tree.body if n is not check], check.body
            namespace.update({a.arg: candidate for a in check.args.args[:1]})
        else:  # MBPP's layout: asserts that call the function by name
            setup, statements = [], tree.body
        for node in setup:
            exec(compile(ast.Module([node], []), "<tests>", "exec", optimize=0), namespace)
        cases = [(lambda node=node: exec(compile(ast.Module([node], []), "<tests>", "exec", optimize=0), namespace),
                  is_case(node)) for node in statements]
except Exception as error:
    cases, harness_error = [], why(error)
for run_case, counts in cases:
    case_deadline = min(time.monotonic() + case_wall, deadline)
    cpu_at_case = solution_cpu()
    try:
        run_case()
        error = None
    except BaseException as e:
        error = why(e)
    if counts:
        passed.append(error is None)
        errors.append(error)
if worker is not None:
    worker.close()
print("\n" + json.dumps({"passed": passed, "errors": errors, "harness_error": harness_error}))
'''.replace("{STDIN_PROGRAM!r}", repr(STDIN_PROGRAM)).replace("exec(PROCESS_TREE_CPU)", _PROCESS_TREE_CPU)



_RESULTS, _RESULTS_LOCK = {}, threading.Lock()  # run_hidden_tests' cache: its arguments -> result, oldest first


def run_hidden_tests(solution: str, tests: str, entry_point: str, setup: str = "", *, cache: bool = True) -> dict:
    """Run a task's hidden tests on a solution in the sandbox: {"passed": [a bool per test case], "errors": [why
    each failed, or None], "harness_error": None, or why the tests could not run at all}.

    Results are cached (the last TEST_CACHE_SIZE used; `cache=False` runs it anyway), failures of the harness are
    not: a call that got no result line (the harness was killed, the sandbox's zygote died) runs again next time.
    A sandbox that cannot start at all (GRPO_SANDBOX names no mode, or one that cannot start here) raises a
    one-line RuntimeError instead of failing every test."""
    key = (solution, tests, entry_point, setup)
    if cache:
        with _RESULTS_LOCK:
            if key in _RESULTS:
                _RESULTS[key] = result = _RESULTS.pop(key)  # the most recently used goes last
                return {name: list(value) if isinstance(value, list) else value for name, value in result.items()}
    _sandbox_mode()  # a misconfiguration raises here, outside the handler below that turns failures into a score
    for old, new in (("TEST_CASE_S", "TEST_CASE_CPU_S"), ("TESTS_DEADLINE_S", "TESTS_CPU_S")):
        if old in globals():  # set by a caller who read older docs: it would change nothing, silently
            raise RuntimeError(f"sandbox.{old} is no longer read: the hidden tests limit CPU time now; set "
                               f"sandbox.{new} (and TEST_WALL_FACTOR, the wall-clock backstop) instead")
    job = {"setup": setup, "solution": solution, "entry_point": entry_point, "tests": tests,
           "case_cpu": TEST_CASE_CPU_S, "solution_cpu": TESTS_CPU_S, "wall_factor": TEST_WALL_FACTOR,
           "error_chars": TEST_ERROR_CHARS,
           "reply_bytes": TEST_REPLY_BYTES}
    try:
        backstop = TESTS_CPU_S * TEST_WALL_FACTOR + 5  # the harness's own start and end, beside the solution's
        rc, output, _ = _run_in_sandbox(_HIDDEN_TESTS_HARNESS, json.dumps(job).encode(), wall=backstop, cpu=backstop)
        result = json.loads(output.rstrip("\n").rsplit("\n", 1)[-1])
    except Exception as error:  # no result line (the harness was killed), or the sandbox failed: nothing passed
        return {"passed": [], "errors": [], "harness_error": f"no result from the harness ({type(error).__name__})"}
    if cache and result.get("harness_error") is None:
        with _RESULTS_LOCK:
            _RESULTS[key] = {name: list(value) if isinstance(value, list) else value for name, value in result.items()}
            while len(_RESULTS) > TEST_CACHE_SIZE:
                del _RESULTS[next(iter(_RESULTS))]
    return result


def run_hidden_tests_batch(solutions: list, tests: list, entry_points: list, setups: list) -> list[dict]:
    """run_hidden_tests for many solutions at once, in parallel; a solution that is None (no code) passes nothing.
    A sandbox that cannot start raises its one-line RuntimeError here (see run_hidden_tests)."""
    def one(job):
        return run_hidden_tests(*job) if job[0] is not None else {"passed": [], "errors": [], "harness_error": None}

    if any(solution is not None for solution in solutions):
        _sandbox_mode()  # once, before the threads: GRPO_SANDBOX=bogus is one error, not one per solution
    with concurrent.futures.ThreadPoolExecutor(SCORING_THREADS) as pool:
        return list(pool.map(one, zip(solutions, tests, entry_points, setups)))
