"""The cheat catalogue (tests/cheats): every cheat scores 0 on what it attacks, with a reason, and the
grader goes on; an honest partial submission in the same run still earns partial credit.

The fixture is chapter 0's softmax exercise (its cells copied from the chapter, numpy only) as a
student edition, the handed-out notebook; each cheat is one submission graded against it, each
in its own grading worker, inside the grader's sandbox (bubblewrap: the tests skip without it and
fail under CI). Around 60 short workers: about a minute on the shared 2-core machine.

The isolation has its own tests, with the student's code run in the sandbox *without* the worker's
audit hook (the hook is a second layer; these show what the operating system alone allows): no
/etc/passwd, no check source, no sibling folder, no network, no signal to the grader (with the
seccomp filter, and with the PID namespace alone), and no process left once a worker has ended.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
import time

import nbformat
import numpy as np
import pytest

from cheats import CHEATS, ISOLATION_CHEATS
from cheats.isolation import sandbox_or_skip
from conftest import ROOT, chapter_notebooks
from make_student import find_exercises

from deviating.exercises.grading import grade_notebook, gradescope_results, write_csv
from deviating.exercises.remote import Limits
from deviating.exercises.student import student_notebook

pytestmark = pytest.mark.slow

# startup 10 s: the setup of a handout that imports torch takes about 3 s on the busy 2-core machine,
# and the cheat whose stub cell never ends waits out the whole startup limit
LIMITS = Limits(timeout=3, startup=10, memory_mb=1024, cpu_s=60, restarts=1)
SECRET = "SECRET-7f3a-the-lecturer's-own-file"
MARKER = "HEADLAB-CHEAT-LEFT-OVER-7c1e"  # in the command line of a cheat's child process
SEED = 4242
ALL_CHEATS = CHEATS + ISOLATION_CHEATS


def _book(folder) -> nbformat.NotebookNode:  # noqa: ANN001
    """The lecturer's notebook: chapter 0's softmax exercise with its solution."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import numpy as np")]
    for path in chapter_notebooks():
        chapter = nbformat.read(path, as_version=4)
        for ex in find_exercises(chapter, path):
            if ex.label == "ex-00-softmax":
                nb.cells += [copy.deepcopy(chapter.cells[i]) for i in range(ex.start, ex.check + 1)]
    return nb


def _handout(folder) -> nbformat.NotebookNode:  # noqa: ANN001
    student = nbformat.from_dict(student_notebook(_book(folder)))
    folder.mkdir()
    nbformat.write(student, folder / "handout.ipynb")
    return student


def _stub(nb) -> int:  # noqa: ANN001
    return next(i for i, c in enumerate(nb.cells) if "exercise-stub" in c.metadata.get("tags", []))


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("cheats")
    student = _handout(tmp / "handout")
    subs = tmp / "submissions"
    subs.mkdir()
    secret, grades_csv, other = tmp / "secret.txt", tmp / "grades.csv", subs / "other_student.ipynb"
    secret.write_text(SECRET)
    grades_csv.write_text("the gradebook\n")
    nbformat.write(student, other)
    book = tmp / "lecturer" / "book.ipynb"
    book.parent.mkdir()
    nbformat.write(_book(tmp), book)
    from deviating.exercises import ch00

    table = [(c.args[0].tolist(), np.asarray(c.expected).tolist()) for c in ch00._softmax_cases()]  # noqa: SLF001
    fill = {"{secret!r}": repr(str(secret)), "{grades!r}": repr(str(grades_csv)), "{other!r}": repr(str(other)),
            "{book!r}": repr(str(book)), "{checks!r}": repr(ch00.__file__), "{grader_pid}": str(os.getpid()),
            "{table!r}": repr(table).replace("inf", "float('inf')"), "{marker}": MARKER}
    sandbox = sandbox_or_skip()
    results = {}
    honest = copy.deepcopy(student)
    honest.cells[_stub(honest)].source = ("def stable_softmax(scores):\n    e = np.exp(scores)\n"
                                          "    return e / e.sum(axis=-1, keepdims=True)")  # overflows on 4 of 8
    entries = [("honest", "stub", None, honest)] + [(name, where, source, None) for name, where, source, _ in ALL_CHEATS]
    for k, (name, where, source, nb) in enumerate(entries):
        if nb is None:
            nb = copy.deepcopy(student)
            for key, value in fill.items():
                source = source.replace(key, value)
            if where == "stub":
                nb.cells[_stub(nb)].source = source
            else:
                nb.cells.insert(_stub(nb) + 1, nbformat.v4.new_code_cell(source))
        path = subs / f"cheat{k:02d}.ipynb"
        nbformat.write(nb, path)
        results[name] = grade_notebook(path, reference=tmp / "handout" / "handout.ipynb", limits=LIMITS,
                                       sandbox=sandbox, seed=SEED)
    link = subs / "linked.ipynb"  # a hand-in that is a symbolic link to the lecturer's notebook
    link.symlink_to(book)
    results["a symlinked hand-in"] = grade_notebook(link, reference=tmp / "handout" / "handout.ipynb", limits=LIMITS,
                                                    sandbox=sandbox, seed=SEED)
    return {"grades": results, "grades_csv": grades_csv, "other": other, "student": student, "tmp": tmp}


def test_the_catalogue_holds_at_least_twenty_cheats() -> None:
    assert len(CHEATS) >= 20 and len({name for name, *_ in ALL_CHEATS}) == len(ALL_CHEATS)
    assert len(ISOLATION_CHEATS) >= 16


@pytest.mark.parametrize("name,reason", [(name, reason) for name, _, _, reason in ALL_CHEATS] +
                         [("a symlinked hand-in", "refused: the submission is a symbolic link")],
                         ids=[c[0] for c in ALL_CHEATS] + ["a symlinked hand-in"])
def test_every_cheat_scores_zero_with_a_reason(graded, name: str, reason: str) -> None:
    grade = graded["grades"][name]
    (e,) = grade.exercises
    assert e.points == 0 and grade.points == 0, e.to_json()
    assert reason in e.reason, (e.reason, grade.notes)


def test_an_honest_partial_submission_still_earns_partial_credit(graded) -> None:
    (e,) = graded["grades"]["honest"].exercises
    assert (e.passed, e.total, e.points) == (4, 8, 0.5)  # 4 of the 8 drawn cases (4 of 8 fixed ones too)
    assert len(e.failures) == 8 and all("expected:" in f and "got:" in f for f in e.failures)


def test_no_cheat_reaches_the_grader_or_its_files(graded) -> None:
    time.sleep(1.0)  # a surviving child of the setsid cheat would rewrite the gradebook every 50 ms
    assert _left_over(MARKER) == []
    assert graded["grades_csv"].read_text() == "the gradebook\n"
    assert not (graded["tmp"] / "grades.csv.db").exists()  # sqlite3 wrote nothing beside it
    assert nbformat.read(graded["other"], as_version=4) == graded["student"]
    everything = json.dumps([[e.to_json() for e in g.exercises] + g.notes for g in graded["grades"].values()])
    assert SECRET not in everything  # a file outside the folder never shows in a reason or a note
    assert "SENTINEL" not in everything  # the worker refused every network call before the test's own hook saw it


def test_the_gradebook_and_gradescope_formats_are_unchanged(graded, tmp_path) -> None:
    grades = list(graded["grades"].values())
    write_csv(grades, tmp_path / "g.csv")
    header = (tmp_path / "g.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header == "submission,ex-00-softmax,total,max,notes"
    results = gradescope_results(graded["grades"]["honest"])
    assert set(results) == {"score", "output", "tests"} and results["score"] == 0.5
    assert set(results["tests"][0]) == {"name", "score", "max_score", "status", "output"}


def test_the_worker_refuses_a_udp_send_before_any_packet_leaves() -> None:
    """The policy alone, in a fresh interpreter: a second hook (added after it) would raise if a send got past."""
    code = textwrap.dedent("""
        import socket, sys, tempfile
        from deviating.exercises.worker import Refused, install_policy
        install_policy(tempfile.mkdtemp())
        def sentinel(event, args):
            if event in ("socket.sendto", "socket.connect") and not str(args[1][0]).startswith("127."):
                raise SystemExit("LEAKED: " + event)
        sys.addaudithook(sentinel)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for target in [("192.0.2.1", 9), ("8.8.8.8", 53)]:
            try:
                s.sendto(b"x", target)
            except Refused as err:
                print("refused:", err)
        s.sendto(b"x", ("127.0.0.1", 9))  # loopback is allowed
        print("loopback ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and "LEAKED" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.stdout.count("refused: no network during grading: socket.sendto") == 2, proc.stdout
    assert "loopback ok" in proc.stdout


@pytest.mark.parametrize("message,why", [
    (b'{"ndarray": {"dtype": "object", "shape": [1], "data": ""}}', "dtype 'object'"),
    (b'{"ndarray": {"dtype": "float64", "shape": [3], "data": "AAAAAAAAAAA="}}', "do not fill its shape"),
    (b'{"ndarray": {"dtype": "float64", "shape": [100000, 100000], "data": ""}}', "elements"),
    (b'{"__reduce__": ["os.system", ["echo hi"]]}', "wrong form"),
    (b'{"tuple": [1], "dict": []}', "wrong form"),
    (b"[" * 100_000 + b"]" * 100_000, "nested"),
    (b"\xff\xfe not json", "not JSON"),
])
def test_a_forged_answer_is_refused_on_arrival(message: bytes, why: str) -> None:
    """What a worker sends is decoded into plain values only; anything else is a BadValue naming it."""
    from deviating.exercises.values import BadValue, decode, encode

    with pytest.raises(BadValue, match=why):
        decode(message)
    assert decode(encode((1.5, [True, None], {"a": "b"}))) == (1.5, [True, None], {"a": "b"})
    class Liar(float):
        def __eq__(self, other):
            return True
    back = decode(encode(Liar(2.0)))
    assert type(back) is float and back == 2.0 and back != 3.0


@pytest.mark.parametrize("stub,limits,reason", [
    ("def f(x):\n    while True:\n        pass", Limits(timeout=60, cpu_s=3, restarts=0), "stopped by its CPU time limit"),
    ("def f(x):\n    open('big.bin', 'wb').write(b'x' * 5_000_000)\n    return x", Limits(timeout=30, file_mb=1),
     "raised OSError"),
    ("def f(x):\n    return bytearray(2 * 2**30)", Limits(timeout=30, memory_mb=1024), "MemoryError"),
], ids=["cpu", "file size", "memory"])
def test_each_resource_limit_gives_a_reason(tmp_path, stub: str, limits: Limits, reason: str) -> None:
    """A worker past its CPU time, file size or memory limit: the call fails with the reason, the grader goes on."""
    from deviating.exercises.remote import RemoteFunction, WorkerFailed

    fn = RemoteFunction("f", "import numpy as np", stub, tmp_path, limits)
    try:
        with pytest.raises(WorkerFailed, match=reason):
            fn(1.0)
    finally:
        fn.close()
    assert not (tmp_path / "big.bin").exists() or (tmp_path / "big.bin").stat().st_size <= 2**20


def test_torch_is_loaded_before_the_hook_only_when_something_imports_more_than_numpy(tmp_path) -> None:
    """The worker imports headlab (and torch) before its audit hook only when the setup or the stub
    needs it (torch's loading uses ctypes, which the hook refuses); a numpy-only chapter starts in a
    tenth of the time. A correct stub that imports torch itself is still graded in full."""
    from deviating.exercises.worker import needs_torch

    assert not needs_torch("import numpy as np\nimport math", "from deviating.exercises.ch00 import check_x")
    assert not needs_torch("import os, ctypes", "from collections import Counter")  # the hook judges these
    assert needs_torch("import numpy as np", "import torch")
    assert needs_torch("from headlab.heads.model import HeadModel", "")
    assert needs_torch("from deviating.analysis.depth import repeat_loss", "")  # imports headlab
    assert needs_torch("import deviating", "") and needs_torch("def broken(:", "")
    student = _handout(tmp_path / "handout")
    nb = copy.deepcopy(student)
    nb.cells[_stub(nb)].source = ("import torch\n\ndef stable_softmax(scores):\n"
                                  "    return torch.softmax(torch.as_tensor(scores, dtype=torch.float64), -1).numpy()")
    path = tmp_path / "torch_stub.ipynb"
    nbformat.write(nb, path)
    (e,) = grade_notebook(path, reference=tmp_path / "handout" / "handout.ipynb", limits=LIMITS).exercises
    assert (e.passed, e.total) == (e.total, 8), e.to_json()


# ----------------------------------------------------------------------- the isolation itself


def _left_over(marker: str) -> list[int]:
    """The processes whose command line holds ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                if marker.encode() in open(f"/proc/{pid}/cmdline", "rb").read():  # noqa: SIM115
                    found.append(int(pid))
            except OSError:
                continue
    return found


def _in_sandbox(code: str, folder, seccomp: bool = True) -> dict:  # noqa: ANN001
    """Run ``code`` (which prints one JSON line) inside the grader's sandbox, with no audit hook."""
    from deviating.exercises.sandbox import hidden_modules

    sandbox = sandbox_or_skip(seccomp=seccomp)
    r, w = os.pipe()
    seccomp_fd = None
    if sandbox.seccomp is not None:
        seccomp_fd = os.memfd_create("seccomp")
        os.write(seccomp_fd, sandbox.seccomp)
        os.lseek(seccomp_fd, 0, os.SEEK_SET)
    cmd = sandbox.command(str(folder), ["-c", code], hidden_modules(("headlab.kernels",), sandbox.needed), w, seccomp_fd)
    try:
        proc = subprocess.run(cmd, pass_fds=tuple(fd for fd in (w, seccomp_fd) if fd is not None), capture_output=True,
                              text=True, timeout=120, env={"PYTHONPATH": sandbox.pythonpath(), "PATH": "/usr/bin"})
    finally:
        for fd in (r, w, seccomp_fd):
            if fd is not None:
                os.close(fd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


PROBE = textwrap.dedent("""
    import json, os, socket, sys
    def attempt(f):
        try:
            f()
            return "allowed"
        except (OSError, ImportError) as err:
            return type(err).__name__
    out = {"uid": os.getuid(), "pid": os.getpid(), "processes": sorted(p for p in os.listdir("/proc") if p.isdigit())}
    for name, path in PATHS.items():
        out[name] = attempt(lambda: open(path, "rb").read(1))
    out["sibling"] = attempt(lambda: os.listdir(SIBLING))
    out["write outside"] = attempt(lambda: open("/usr/evil", "w"))
    out["network"] = attempt(lambda: socket.create_connection(("192.0.2.1", 80), timeout=2))
    out["kill the grader"] = attempt(lambda: os.kill(GRADER, 9))
    out["pidfd of the grader"] = attempt(lambda: os.pidfd_open(GRADER))
    out["library's answer"] = attempt(lambda: __import__("headlab.kernels.reference"))
    out["write own folder"] = attempt(lambda: open("mine.txt", "w").write("x"))
    print(json.dumps(out))
""")


@pytest.mark.parametrize("seccomp", [True, False], ids=["seccomp", "namespaces alone"])
def test_the_sandbox_alone_keeps_files_processes_and_network_out_of_reach(tmp_path, seccomp: bool) -> None:
    import deviating.exercises.ch00 as ch00

    folder, sibling = tmp_path / "alice", tmp_path / "bob"
    folder.mkdir()
    sibling.mkdir()
    (sibling / "bob.ipynb").write_text("{}")
    chapter = next(p for p in chapter_notebooks() if p.name.startswith("01_"))
    paths = {"/etc/passwd": "/etc/passwd", "the checks' source": ch00.__file__, "a chapter": str(chapter),
             "the grader's environment": f"/proc/{os.getpid()}/environ"}
    code = f"PATHS = {paths!r}\nSIBLING = {str(sibling)!r}\nGRADER = {os.getpid()}\n" + PROBE
    out = _in_sandbox(code, folder, seccomp=seccomp)
    assert out["uid"] == 65534 and out["processes"] == ["1", "2"], out  # bwrap's init and this process, no other
    for name in paths:
        assert out[name] in ("FileNotFoundError", "PermissionError"), (name, out[name])
    assert out["sibling"] == "FileNotFoundError" and out["write outside"] in ("OSError", "PermissionError")
    assert out["network"] == "OSError", out["network"]  # ENETUNREACH: no interface but loopback
    assert out["kill the grader"] == ("PermissionError" if seccomp else "ProcessLookupError")
    assert out["pidfd of the grader"] == ("PermissionError" if seccomp else "ProcessLookupError")
    assert out["library's answer"] == "ModuleNotFoundError"
    assert out["write own folder"] == "allowed" and (folder / "mine.txt").read_text() == "x"
    assert os.getppid() > 0  # (and this process, the grader, is still here)


def test_a_setsid_child_does_not_outlive_its_worker(tmp_path) -> None:
    """A child that leaves the worker's session, even one started without an audit event, is gone
    the moment the grader has closed the worker: before it could write anything."""
    from deviating.exercises.remote import RemoteFunction

    marker = f"{MARKER}-{os.getpid()}"
    stub = ("import os, sys\nfrom multiprocessing.util import spawnv_passfds\ndef f(x):\n"
            "    spawnv_passfds(os.fsencode(sys.executable), [sys.executable, '-c', 'import os, time\\nos.setsid()\\ntime.sleep(60)', "
            f"{marker!r}], ())\n    return x")
    fn = RemoteFunction("f", "import numpy as np", stub, tmp_path, LIMITS, sandbox=sandbox_or_skip())
    try:
        assert fn(2.0) == 2.0
        time.sleep(0.5)
        assert len(_left_over(marker)) == 1  # the child runs while its worker does
    finally:
        fn.close()
    assert _left_over(marker) == []  # at once: close() returns only when the namespace is empty


def test_the_seccomp_program_denies_the_calls_that_reach_another_process() -> None:
    import struct

    from deviating.exercises.sandbox import seccomp_filter

    prog = seccomp_filter("x86_64")
    ops = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    denied = {k for code, _, _, k in ops if code == 0x15} - {0xC000003E}
    assert denied == {101, 62, 200, 310, 311, 424, 434, 438}  # ptrace, kill, tkill, process_vm_*, pidfd_*
    assert ops[-2][3] == 0x7FFF0000 and ops[-1][3] == 0x00050001  # allow the rest; EPERM for those
    assert seccomp_filter("riscv64") is None


def test_a_module_inside_a_hidden_folder_is_hidden_once(tmp_path) -> None:
    """Chapters 5, 7 and 9 forbid deviating.exercises.by_hand, which lies in the hidden folder of the
    checks: bwrap could not mount over a file of an empty, read-only folder, and the worker never started."""
    sandbox = sandbox_or_skip()
    cmd = sandbox.command(str(tmp_path), ["-c", "pass"], ("deviating.exercises.by_hand", "headlab.kernels"), 3, None)
    targets = [cmd[i + 2] for i, a in enumerate(cmd) if a == "--ro-bind"] + \
        [cmd[i + 1] for i, a in enumerate(cmd) if a == "--tmpfs"]  # what each mount covers
    exercises = os.path.join(sandbox.packages["deviating"], "exercises")
    assert exercises in targets and os.path.join(sandbox.packages["headlab"], "kernels") in targets
    assert not [t for t in targets if t.startswith(exercises + os.sep)]
