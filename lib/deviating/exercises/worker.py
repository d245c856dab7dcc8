"""The grading worker: a fresh process that holds one exercise's stub and the chapter's setup, nothing else.

``python -m gradingworker.worker READ_FD WRITE_FD`` (a copy of this module and of
:mod:`deviating.exercises.values`, see :mod:`deviating.exercises.sandbox`; without isolation
``python -m deviating.exercises.worker``) is started by the grader (:mod:`deviating.exercises.remote`)
in the submission's own folder, under resource limits, with its standard output and error thrown
away. It reads requests from ``READ_FD`` and writes answers to ``WRITE_FD``, one frame each
(8 bytes of length, then the bytes):

1. the first request (a pickle, from the grader: trusted) holds the setup's source, the stub's
   source, the function's name and the folder; the worker installs its audit hook, runs the setup
   (statement by statement: one that fails to import, e.g. the checks or a module hidden from the
   sandbox, or that names what such an import would have bound, is skipped) then the stub in one
   namespace, and answers whether the function is there;
2. every further request holds one call's arguments (a pickle from the grader) and the modules
   the call must not use; the answer (JSON, :mod:`deviating.exercises.values`) is the returned
   value, or the exception's type, or that the call used a forbidden module, and the arguments
   as they are after the call (so the grader sees an in-place change).

The answers are data: nothing the worker sends is run by the grader, and the grader never
unpickles what comes back. The worker decides nothing; it only computes the student's values.

The fence is the operating system's (:mod:`deviating.exercises.sandbox`). The audit hook
(:func:`install_policy`, PEP 578: a hook cannot be removed once added) is a second layer that
explains refusals in the grade's reason; it refuses,
from then on: opening or listing a file outside the folder and the Python installation (the
check modules that hold the expected answers are outside it: ``deviating/exercises/chNN.py``),
writing outside the folder, starting a process or a thread, signals to other processes, any
network address other than loopback (``connect``, ``sendto``, ``sendmsg``, ``bind``, name
look-ups: refused before a packet leaves), ``ctypes``, ``gc``'s object lists, and changing the
profiler that watches for the library's own answer. PEP 578 says a hook alone is no sandbox;
native code (``torch.from_file``, ``sqlite3``, ``_posixsubprocess``) raises no event, and a stub can
replace what raises one. The grade does not depend on it: it is computed elsewhere, and the
sandbox decides what the worker can reach.
"""

from __future__ import annotations

import ast
import ctypes  # noqa: F401 (loaded before the hook, which then refuses every ctypes call)
import importlib.util
import json
import os
import pickle
import re
import struct
import sys
import threading
import traceback
from pathlib import Path, PosixPath

import numpy as np  # noqa: F401 (the setup's most common import, loaded before the hook)

__all__ = ["read_frame", "write_frame", "install_policy", "needs_torch", "main", "Refused"]

_HEADER = struct.Struct(">Q")
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,8}")
_EXERCISES = str(Path(__file__).resolve().parent)
_PROCESS = {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen",
            "os.killpg", "signal.pthread_kill", "_thread.start_new_thread", "os.startfile", "pty.spawn",
            "sys.settrace", "gc.get_objects", "gc.get_referrers", "gc.get_referents"}
_NETWORK = {"socket.connect", "socket.sendto", "socket.sendmsg", "socket.bind"}
_LOOKUP = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr",
           "socket.getnameinfo"}
_CHANGE = {"os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.utime", "os.link",
           "os.symlink", "os.rename", "shutil.rmtree", "os.chdir", "os.chflags", "os.mkfifo", "os.mknod"}


class Refused(PermissionError):
    """Something the grading worker does not allow (see the module docstring)."""


def read_frame(fd: int, limit: int) -> bytes | None:
    """One frame from ``fd``; None at the end of the stream; ValueError past ``limit`` bytes."""
    head = _read_exactly(fd, _HEADER.size)
    if head is None:
        return None
    (n,) = _HEADER.unpack(head)
    if n > limit:
        raise ValueError(f"a frame of {n} bytes (at most {limit})")
    body = _read_exactly(fd, n)
    if body is None:
        return None
    return body


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_frame(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _loopback(address) -> bool:  # noqa: ANN001
    host = address[0] if isinstance(address, tuple) and address else address
    return isinstance(host, str) and (host in ("localhost", "::1") or host.startswith("127."))


def install_policy(folder: str) -> None:
    """Add this process's audit hook (see the module docstring); ``folder`` is the one place to write."""
    import site

    folder = os.path.realpath(folder)
    packages = []
    for name in ("headlab", "deviating"):
        spec = importlib.util.find_spec(name)  # its folder, without importing it
        if spec is not None and spec.submodule_search_locations:
            packages.append(os.path.realpath(next(iter(spec.submodule_search_locations))))
    checks = tuple(os.path.join(p, "exercises") for p in packages if p.endswith("deviating")) + (_EXERCISES,)
    reads = tuple({folder, *packages, *(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)),
                   *(os.path.realpath(p) for p in site.getsitepackages() + [site.getusersitepackages()]),
                   "/usr", "/lib", "/lib64", "/etc/fonts", "/etc/ld.so.cache", "/etc/localtime",
                   os.path.realpath("/proc/self"), "/proc/cpuinfo", "/proc/meminfo", "/sys/devices/system/cpu",
                   "/sys/fs/cgroup", "/dev/null", "/dev/urandom"})
    loaded = frozenset(os.path.realpath(m.__file__) for m in list(sys.modules.values())
                       if getattr(m, "__file__", None) and str(m.__file__).startswith(_EXERCISES))
    writes = (folder, "/dev/null")
    me = os.getpid()
    profiles = [1]  # the worker sets its profiler once, after the stub; every later change is refused

    def where(path) -> str | None:  # noqa: ANN001
        if type(path) in (str, bytes):
            text = os.fsdecode(path)
        elif type(path) in (PosixPath, Path):
            text = str(path)
        else:
            return None  # an fd, or something whose __fspath__ would run here: refused by the callers
        return os.path.realpath(text)

    def readable(path) -> bool:  # noqa: ANN001
        if type(path) is int:
            return True
        real = where(path)
        return real is not None and _under(real, reads) and (not _under(real, checks) or real in loaded)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            if path is None or type(path) is int:
                return
            if writing and not _under(where(path) or "/", writes):
                raise Refused(f"writing {os.fsdecode(path) if type(path) in (str, bytes) else '?'} is not allowed "
                              "while grading: a submission writes only in its own folder")
            if not writing and not readable(path):
                raise Refused(f"reading {os.fsdecode(path) if type(path) in (str, bytes) else '?'} is not allowed "
                              "while grading: a submission reads only its own folder and the Python installation")
        elif event in ("os.listdir", "os.scandir"):
            if args and args[0] is not None and not readable(args[0]):
                raise Refused("listing a folder outside the submission's own is not allowed while grading")
        elif event in _CHANGE:
            paths = [a for a in args[:2] if type(a) in (str, bytes, PosixPath, Path)]
            if event == "os.symlink":
                paths = paths[1:]
            if not paths or not all(_under(where(p) or "/", (folder,)) for p in paths):
                raise Refused(f"{event} outside the submission's own folder is not allowed while grading")
        elif event == "sys.setprofile":
            if not profiles:
                raise Refused("changing the profiler is not allowed while grading")
            profiles.pop()
        elif event in _PROCESS:
            raise Refused(f"{event} is not allowed while grading (no processes, threads, tracers or object lists)")
        elif event == "os.kill":
            if args[0] != me:
                raise Refused("signalling another process is not allowed while grading")
        elif event in _NETWORK:
            if not _loopback(args[1] if len(args) > 1 else None):
                raise Refused(f"no network during grading: {event} to {str(args[1])[:60]} was refused")
        elif event in _LOOKUP:
            if not _loopback(args[0] if args else None):
                raise Refused(f"no network during grading: the name lookup of {str(args[0])[:60]} was refused")
        elif event.startswith("ctypes."):
            raise Refused(f"{event} is not allowed while grading")

    sys.addaudithook(hook)


def _no_threads() -> None:
    """Make starting a thread fail (Python 3.11 raises no audit event for it; RLIMIT_NPROC caps it too)."""
    import _thread

    def refuse(*args, **kwargs):  # noqa: ANN002, ANN003, ARG001
        raise Refused("starting a thread is not allowed while grading")

    _thread.start_new_thread = _thread.start_new = refuse
    threading._start_new_thread = refuse  # noqa: SLF001 (the one name threading starts its threads with)


def _guard(forbid_box: list, hit_box: list):  # noqa: ANN202
    """A profiler that notes the first call into a module of ``forbid_box[0]`` (the library's answer)."""
    import inspect

    def profile(frame, event, arg):  # noqa: ANN001, ARG001
        forbid = forbid_box[0]
        if not forbid or event != "call" or hit_box or not frame.f_code.co_flags & inspect.CO_OPTIMIZED:
            return
        module = frame.f_globals.get("__name__", "") or ""
        if any(module == f or module.startswith(f + ".") for f in forbid) and not _importing(frame):
            hit_box.append(f"{module}.{frame.f_code.co_name}")
    return profile


def _importing(frame) -> bool:  # noqa: ANN001
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _where(err: BaseException) -> str:
    """The exception's type and the line of the student's code: never the student's message (it may
    quote a file); the worker's own refusals and a memory error say what they are."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename in ("<stub cell>", "<setup cell>")]
    line = f" at line {frames[-1].lineno} of the {frames[-1].filename.strip('<>')}" if frames else ""
    if isinstance(err, SyntaxError):
        return f"SyntaxError: {err.msg} (line {err.lineno} of the {str(err.filename).strip('<>')})"
    if isinstance(err, Refused):
        return f"Refused{line}: {str(err)[:200]}"
    if isinstance(err, MemoryError):
        return f"MemoryError{line}: it ran out of its memory limit"
    name = getattr(err, "name", None) if isinstance(err, ImportError) else None
    if type(name) is str and _MODULE_NAME.fullmatch(name):  # a module's name, never the student's text
        return f"{type(err).__name__}{line} (module {name})"
    return f"{type(err).__name__}{line}"


def _echo(x):  # noqa: ANN001, ANN202
    """The arrays and tensors among the arguments, as they are after the call (None for the rest)."""
    if isinstance(x, (list, tuple)):
        return [_echo(v) for v in x]
    if isinstance(x, dict):
        return {k: _echo(v) for k, v in x.items() if isinstance(k, str)}
    return x if isinstance(x, np.ndarray) or type(x).__name__ == "Tensor" else None


def _hooks_on(x) -> int:  # noqa: ANN001
    """How many hooks sit on the torch modules among the arguments (a HeadModel's module included),
    and on every module at once (torch's global hooks)."""
    nn = sys.modules.get("torch.nn")
    if nn is None:
        return 0
    modules: dict[int, object] = {}

    def walk(v) -> None:  # noqa: ANN001
        if isinstance(v, (list, tuple)):
            for w in v:
                walk(w)
        elif isinstance(v, dict):
            for w in v.values():
                walk(w)
        elif isinstance(v, nn.Module):
            modules.update((id(m), m) for m in v.modules())
        elif isinstance(getattr(v, "model", None), nn.Module):  # a HeadModel
            walk(v.model)

    walk(x)
    names = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    total = sum(len(getattr(m, n, ())) for m in modules.values() for n in names)
    glob = sys.modules.get("torch.nn.modules.module")
    return total + sum(len(getattr(glob, f"_global{n}", ())) for n in names)


def _answer(fd: int, **payload) -> None:
    from .values import BadValue, encode

    try:
        body = encode(payload.pop("value")) if "value" in payload else b"null"
    except BadValue as err:
        payload = {"bad": str(err)}
        body = b"null"
    except BaseException as err:  # noqa: BLE001 (a returned object whose conversion raises)
        payload = {"bad": f"a value that could not be read ({type(err).__name__})"}
        body = b"null"
    write_frame(fd, json.dumps(payload).encode() + b"\n" + body)


def needs_torch(*sources: str) -> bool:
    """Whether the sources import anything beyond the standard library, numpy and
    ``deviating.exercises``: then :func:`main` imports ``headlab`` (and torch, whose loading needs
    ``ctypes``) before the hook. Source that does not parse counts as needing it."""
    light = set(sys.stdlib_module_names) | {"numpy"}
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return True
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(n.split(".")[0] not in light and not (n + ".").startswith("deviating.exercises.") for n in names):
                return True
    return False


def _run_setup(source: str, namespace: dict) -> None:
    """The chapter's setup (the handed-out notebook's: trusted), one top-level statement at a time. A
    statement that raises ImportError (the checks, a module the sandbox hides) or NameError (a name such
    an import would have bound) is skipped; any other error stops the setup."""
    tree = ast.parse(source, "<setup cell>")
    for node in tree.body:
        code = compile(ast.Module(body=[node], type_ignores=[]), "<setup cell>", "exec")
        try:
            exec(code, namespace)  # noqa: S102
        except (ImportError, NameError):
            continue


def main(argv: list[str]) -> int:
    rd, wr = int(argv[0]), int(argv[1])
    from .values import BadValue, encode  # noqa: F401 (loaded before the hook)

    start = pickle.loads(read_frame(rd, 1 << 30))
    os.chdir(start["folder"])
    if needs_torch(start["setup"], start["stub"]):
        try:  # torch loads its libraries with ctypes, which the hook refuses: load it (and the model) first
            import headlab.heads.model  # noqa: F401
        except ImportError:
            pass
    install_policy(start["folder"])
    namespace: dict = {"__name__": "__main__"}
    try:
        _run_setup(start["setup"], namespace)
    except BaseException as err:  # noqa: BLE001
        _answer(wr, status="setup", reason=_where(err))
        return 0
    try:
        exec(compile(start["stub"], "<stub cell>", "exec"), namespace)  # noqa: S102 (the student's code, fenced)
    except BaseException as err:  # noqa: BLE001
        _answer(wr, status="broken", reason=_where(err))
        return 0
    fn = namespace.get(start["function"])
    if not callable(fn):
        _answer(wr, status="missing")
        return 0
    owner = getattr(fn, "__module__", "") or ""
    if owner.split(".")[0] in ("headlab", "deviating"):
        _answer(wr, status="library", owner=f"{owner}.{getattr(fn, '__name__', start['function'])}")
        return 0
    forbid_box, hit_box = [()], []
    profile = _guard(forbid_box, hit_box)
    _no_threads()
    threading.setprofile(profile)  # (no thread can start: see _no_threads)
    try:
        sys.setprofile(profile)  # the one change allowed: the hook refuses any later one
    except Refused:
        _answer(wr, status="broken", reason="the stub changed the profiler the grader watches with")
        return 0
    _answer(wr, status="ready")
    while (frame := read_frame(rd, 1 << 30)) is not None:
        request = pickle.loads(frame)
        forbid_box[0], hit_box[:] = tuple(request["forbid"]), []
        hooks = _hooks_on((request["args"], request["kwargs"]))
        try:
            value = fn(*request["args"], **request["kwargs"])
        except NotImplementedError:
            forbid_box[0] = ()
            _answer(wr, status="not implemented")
            continue
        except BaseException as err:  # noqa: BLE001 (SystemExit and KeyboardInterrupt too)
            forbid_box[0] = ()
            _answer(wr, status="raised", error=_where(err), hit=hit_box[0] if hit_box else None)
            continue
        forbid_box[0] = ()
        if hit_box or sys.getprofile() is not profile:
            _answer(wr, status="forbidden", hit=hit_box[0] if hit_box else "the profiler (it was replaced)")
            continue
        if (left := _hooks_on((request["args"], request["kwargs"])) - hooks) > 0:
            _answer(wr, status="hooks left", n=left)
            continue
        _answer(wr, status="returned", value=(value, _echo(request["args"]), _echo(request["kwargs"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
