"""The operating system's fence around a grading worker: bubblewrap (``bwrap``), a seccomp filter.

:class:`Sandbox` builds the command line that starts one grading worker
(:mod:`deviating.exercises.worker`) inside `bubblewrap <https://github.com/containers/bubblewrap>`_,
Debian's ``bubblewrap`` package. What the worker then sees and can do:

- **Files.** Read-only: the interpreter and its standard library, the virtual environment's
  packages, ``/usr`` (system libraries), a few files of ``/etc`` that libraries read (fonts, the
  dynamic linker's cache, the time zone), and the ``headlab`` and ``deviating`` packages *without*
  ``deviating/exercises`` (the checks and their expected values: an empty folder takes its place)
  and without the modules the exercise under grade must not call (the library's answer: an empty
  folder or an empty file takes their place, their compiled ``.pyc`` too; :func:`hidden_modules`).
  ``headlab``'s package ``__init__`` files are replaced by ones that load each name on first use
  (:func:`lazy_init`), so that importing ``headlab`` does not need the hidden modules; what
  rebuilding a HeadModel argument needs (:attr:`Sandbox.needed`) is never hidden. The worker's own code is
  a copy of two files (``worker.py``, ``values.py``) in a folder of its own. Read-write: one fresh
  folder, ``/submission``, holding the handed-out files. Nothing else exists in its view: not the
  chapters (solutions), not the other submissions, not the gradebook, not ``/etc/passwd``, not the
  grader's temporary files.
- **User.** User namespace, uid and gid 65534 ("nobody") inside; no capabilities; no further user
  namespace (``--disable-userns``).
- **Processes.** Its own PID namespace (``--unshare-pid``): it sees only its own processes and
  cannot name, signal or trace any other. When the worker's namespace ends (the worker exits, or
  the grader kills the namespace's first process), the kernel kills every process left in it, a
  ``setsid`` child included; the grader waits for that before it goes on (:mod:`.remote`).
  ``--die-with-parent``: if the grader dies, so does the sandbox. ``--new-session``: no terminal.
- **Network.** Its own network namespace (``--unshare-net``): a loopback interface only.
- **System calls.** A seccomp filter (:func:`seccomp_filter`) answers ``EPERM`` to ``ptrace``,
  ``kill``, ``tkill``, ``pidfd_open``, ``pidfd_send_signal``, ``pidfd_getfd``,
  ``process_vm_readv`` and ``process_vm_writev`` (x86-64 and aarch64; on another machine the PID
  namespace alone keeps other processes out of reach, and the filter is left out).

The limits of :class:`deviating.exercises.remote.Limits` (memory, CPU time, file size, processes)
apply inside. Without ``bwrap`` (or where it cannot start a sandbox, e.g. user namespaces are
disabled), :func:`find_bwrap` says why, and the grader refuses to grade unless told
``--unsafe-no-isolation``.
"""

from __future__ import annotations

import ast
import functools
import glob
import json
import importlib.util
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path

__all__ = ["Sandbox", "IsolationUnavailable", "find_bwrap", "seccomp_filter", "hidden_modules", "lazy_init", "FOLDER"]

FOLDER = "/submission"  # where the worker's own folder appears inside the sandbox
_HERE = Path(__file__).resolve().parent
_ETC = ("/etc/ld.so.cache", "/etc/fonts", "/etc/localtime", "/etc/alternatives")


class IsolationUnavailable(RuntimeError):
    """bubblewrap is missing or cannot start a sandbox here (the message says why and what to do)."""


# ----------------------------------------------------------------------- seccomp

_SYSCALLS = {  # (audit arch, {name: number})
    "x86_64": (0xC000003E, {"ptrace": 101, "kill": 62, "tkill": 200, "process_vm_readv": 310,
                            "process_vm_writev": 311, "pidfd_send_signal": 424, "pidfd_open": 434,
                            "pidfd_getfd": 438}),
    "aarch64": (0xC00000B7, {"ptrace": 117, "kill": 129, "tkill": 130, "process_vm_readv": 270,
                             "process_vm_writev": 271, "pidfd_send_signal": 424, "pidfd_open": 434,
                             "pidfd_getfd": 438}),
}
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW, _KILL, _EPERM = 0x7FFF0000, 0x80000000, 0x00050000 | 1


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """A classic-BPF seccomp program (the bytes ``bwrap --seccomp`` reads): ``EPERM`` for the calls that
    reach another process (see the module docstring), every other call allowed, a call of another ABI
    (32-bit, x32) killed. None on a machine other than x86-64 or aarch64."""
    machine = machine or platform.machine()
    if machine not in _SYSCALLS:
        return None
    arch, numbers = _SYSCALLS[machine]
    deny = sorted(numbers.values())
    op = struct.Struct("=HBBI").pack
    prog = [op(_LD_W_ABS, 0, 0, 4), op(_JEQ_K, 1, 0, arch), op(_RET_K, 0, 0, _KILL), op(_LD_W_ABS, 0, 0, 0)]
    if machine == "x86_64":  # x32 system calls (bit 30) would name the same calls by other numbers
        prog += [op(_JGE_K, 0, 1, 0x40000000), op(_RET_K, 0, 0, _KILL)]
    for i, nr in enumerate(deny):  # jump to the EPERM return, after the remaining tests and the allow
        prog.append(op(_JEQ_K, len(deny) - i, 0, nr))
    prog += [op(_RET_K, 0, 0, _ALLOW), op(_RET_K, 0, 0, _EPERM)]
    return b"".join(prog)


# ----------------------------------------------------------------------- the view


@functools.lru_cache(maxsize=1)
def find_bwrap() -> str:
    """The path of a ``bwrap`` that can start a sandbox here; IsolationUnavailable saying why not."""
    path = shutil.which("bwrap")
    if path is None:
        raise IsolationUnavailable(
            "bubblewrap (bwrap) is not installed, so the grader cannot confine the students' code: install it "
            "(Debian/Ubuntu: apt-get install -y bubblewrap), or pass --unsafe-no-isolation to grade without "
            "operating-system isolation (recorded in the gradebook)")
    probe = subprocess.run([path, "--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/",
                            "--proc", "/proc", "--dev", "/dev", "true"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        raise IsolationUnavailable(
            f"{path} cannot start a sandbox here ({probe.stderr.strip()[:200] or f'status {probe.returncode}'}): "
            "user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1), or pass "
            "--unsafe-no-isolation to grade without operating-system isolation (recorded in the gradebook)")
    return path


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(next(iter(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=None)
def _module_location(name: str) -> tuple[str, bool] | None:
    """(path, is a package) of a module of the book's packages, found without running it; None if absent."""
    parts = name.split(".")
    if parts[0] not in ("headlab", "deviating"):
        return None
    root = _package_dir(parts[0])
    if root is None:
        return None
    base = os.path.join(root, *parts[1:])
    if os.path.isdir(base):
        return base, True
    return (base + ".py", False) if os.path.isfile(base + ".py") else None


def lazy_init(source: str, package: str) -> str | None:
    """A package ``__init__`` that binds its re-exported names on first use (PEP 562), built from ``source``,
    the real one, or None when that does more than re-export (then it stays as it is). Each top-level
    ``from headlab.x import name`` becomes an entry of a table that the module's ``__getattr__`` reads, so
    importing the package (which a setup cell and a pickled HeadModel need) loads none of its modules, and a
    module the sandbox hides stays out unless something asks for one of its names."""
    tree = ast.parse(source)
    where, kept = {}, []
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) or \
                isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("headlab"):
            where.update({(a.asname or a.name): (node.module, a.name) for a in node.names if a.name != "*"})
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id.startswith("__") for t in node.targets):
            kept.append(ast.unparse(node))
        else:
            return None
    return "\n".join([
        f'"""{package} as a grading worker sees it: each name loads on first use (deviating.exercises.sandbox)."""',
        "import importlib", *kept, f"_WHERE = {where!r}", "",
        "def __getattr__(name):",
        "    if name not in _WHERE:",
        "        raise AttributeError(f\"module {__name__!r} has no attribute {name!r}\")",
        "    module, attribute = _WHERE[name]",
        "    if module == __name__:  # a sub-module of this package",
        "        value = importlib.import_module(f'{module}.{attribute}')",
        "    else:",
        "        value = getattr(importlib.import_module(module), attribute)",
        "    globals()[name] = value",
        "    return value", ""])


def _children(package: str) -> list[str]:
    """The modules and sub-packages directly inside one of the book's packages (found on disk)."""
    found = _module_location(package)
    if found is None or not found[1]:
        return []
    names = []
    for entry in sorted(os.listdir(found[0])):
        path = os.path.join(found[0], entry)
        if entry.endswith(".py") and entry != "__init__.py":
            names.append(f"{package}.{entry[:-3]}")
        elif os.path.isdir(path) and entry != "__pycache__" and entry.isidentifier():
            names.append(f"{package}.{entry}")
    return names


def hidden_modules(forbid: tuple[str, ...], needed: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The modules the sandbox hides for a check that forbids ``forbid`` (see :class:`Sandbox`): each forbidden
    module, except what ``needed`` holds (what rebuilds a HeadModel passed as an argument,
    :attr:`Sandbox.needed`); of a forbidden package that a needed module lies in, every part not needed."""
    def within(m: str) -> bool:
        return any(n == m or n.startswith(m + ".") for n in needed)

    hidden, todo = [], list(forbid)
    while todo:
        m = todo.pop(0)
        if not within(m):
            hidden.append(m)
        elif m not in needed or _module_location(m) and _module_location(m)[1]:
            todo += [c for c in _children(m) if c not in todo]
    return tuple(dict.fromkeys(hidden))


class Sandbox:
    """How to start grading workers inside bubblewrap (see the module docstring).

    ``seccomp=False`` leaves the filter out (the isolation tests use it to show that the PID
    namespace alone keeps the grader out of reach). The worker's code is copied once, into a
    private folder that lives as long as this object.
    """

    def __init__(self, seccomp: bool = True):
        self.bwrap = find_bwrap()
        self.seccomp = seccomp_filter() if seccomp else None
        self._code = tempfile.mkdtemp(prefix="headlab-worker-code-")
        weakref.finalize(self, shutil.rmtree, self._code, True)
        package = Path(self._code) / "gradingworker"
        package.mkdir()
        (package / "__init__.py").write_text('"""The grading worker\'s own code, copied for its sandbox."""\n')
        for name in ("worker.py", "values.py"):
            shutil.copyfile(_HERE / name, package / name)
        self.packages = {name: d for name in ("headlab", "deviating") if (d := _package_dir(name)) is not None}
        self._inits: dict[str, str] = {}  # a package's __init__.py -> its lazy stand-in (see lazy_init)
        root = self.packages.get("headlab")
        for init in sorted(Path(root).rglob("__init__.py")) if root else ():
            package = ".".join(init.parent.relative_to(Path(root).parent).parts)
            lazy = lazy_init(init.read_text(), package)
            if lazy is not None:
                self._inits[str(init)] = os.path.join(self._code, f"{package}.init.py")
                Path(self._inits[str(init)]).write_text(lazy)
        self.needed = self._needed()

    def _needed(self) -> frozenset[str]:
        """The book's modules that rebuilding a HeadModel loads in this sandbox (never hidden: the library-call
        detector watches them instead; see the README)."""
        if "headlab" not in self.packages:
            return frozenset()
        code = ("import json, sys\nimport headlab.heads.model, headlab.models.gpt\n"
                "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('headlab', 'deviating')))))")
        r, w = os.pipe()
        try:
            out = subprocess.run(self.command("/tmp", ["-c", code], (), w, None), pass_fds=(w,), capture_output=True,
                                 text=True, timeout=300, env={"PYTHONPATH": self.pythonpath(), "PATH": "/usr/bin"})
        finally:
            os.close(r)
            os.close(w)
        if out.returncode != 0:
            raise IsolationUnavailable(f"a sandboxed Python could not import headlab: {out.stderr.strip()[-300:]}")
        return frozenset(json.loads(out.stdout.strip().splitlines()[-1]))

    def _view(self, hide: tuple[str, ...]) -> list[str]:
        # /proc, /dev and a fresh /tmp first: a later mount shadows an earlier one at a path below it, and the
        # interpreter, the packages or the checkout may live under /tmp (a CI clone does)
        args: list[str] = ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for top in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        for path in _ETC:
            args += ["--ro-bind-try", path, path]
        prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
        for p in sorted(prefixes):
            args += ["--ro-bind", p, p]
        if os.path.realpath(sys.prefix) != sys.prefix:  # a venv reached through a symbolic link
            args += ["--symlink", os.path.realpath(sys.prefix), sys.prefix]
        for d in self.packages.values():
            args += ["--ro-bind", d, d]
        for init, lazy in self._inits.items():  # headlab's names load on first use (see lazy_init)
            args += ["--ro-bind", lazy, init]
            for pyc in glob.glob(os.path.join(os.path.dirname(init), "__pycache__", "__init__.*.pyc")):
                args += ["--ro-bind", "/dev/null", pyc]
        masks = [os.path.join(self.packages["deviating"], "exercises")] if "deviating" in self.packages else []
        masks += [found[0] for m in hide if (found := _module_location(m)) is not None]
        masks = [m for m in masks if not any(m.startswith(other + os.sep) for other in masks)]  # once hidden, hidden
        for path in masks:
            if os.path.isdir(path):
                args += ["--tmpfs", path, "--remount-ro", path]
            else:
                stem = Path(path).stem
                for pyc in [path, *glob.glob(os.path.join(os.path.dirname(path), "__pycache__", f"{stem}.*.pyc"))]:
                    args += ["--ro-bind", "/dev/null", pyc]
        args += ["--ro-bind", self._code, "/opt/grading",
                 "--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
        return args

    def command(self, folder: str, python_args: list[str], hide: tuple[str, ...], info_fd: int,
                seccomp_fd: int | None) -> list[str]:
        """The ``bwrap`` command line: ``folder`` appears as :data:`FOLDER`, ``hide`` lists the modules to hide."""
        cmd = [self.bwrap, "--unshare-user", "--uid", "65534", "--gid", "65534", "--disable-userns",
               "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent", "--new-session", "--hostname", "grading",
               *(["--cap-drop", "ALL"] if os.geteuid() == 0 else []),
               *self._view(hide), "--bind", folder, FOLDER, "--chdir", FOLDER, "--info-fd", str(info_fd)]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        return [*cmd, "--", sys.executable, *python_args]

    def pythonpath(self) -> str:
        """The worker's ``PYTHONPATH`` inside: its own code, then the folders holding the book's packages."""
        parents = dict.fromkeys(os.path.dirname(d) for d in self.packages.values())
        return os.pathsep.join(["/opt/grading", *parents])
