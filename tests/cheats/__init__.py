"""The cheat catalogue of tests/test_cheats.py: what a student who wants the points without the work tries.

Each entry is ``(name, where, source, reason)``: ``where`` is ``"stub"`` (the source replaces the
stub of ``stable_softmax``, chapter 0's exercise, so it runs in the grading worker) or ``"cell"``
(an extra cell after the untouched stub: the grader never runs it); ``reason`` is a piece of the
reason the grade must give. Every cheat must score 0, with that reason, and the grader must go on.
``{secret!r}``, ``{grades!r}`` and ``{other!r}`` are replaced by the test (a file outside the
submission's folder holding a secret, the gradebook, another student's submission).
:data:`ISOLATION_CHEATS` are the mechanisms of issue 40 that got past the worker's audit hook;
the operating system's sandbox (deviating.exercises.sandbox) stops them.
"""

from __future__ import annotations

_ZEROS = "    return np.zeros(np.shape(scores))"
_SENTINEL = ("import socket, sys\ndef _sentinel(event, args):\n"
             "    if event.startswith('socket.') and event != 'socket.__new__':\n"
             "        raise RuntimeError('SENTINEL: the worker let ' + event + ' through')\nsys.addaudithook(_sentinel)\n")

ISSUE_CHEAT = '''import json, deviating.exercises.grading as _g
def _fake(namespace, spec, nonce):
    print(f"{nonce} " + json.dumps({"status": "passed", "passed": 5, "total": 5, "reason": ""}), flush=True)
_g.grade_in_kernel = _fake
'''

CHEATS: list[tuple[str, str, str, str]] = [
    # ---------------------------------------------------------------- the grading machinery
    ("the issue's cheat: replace the grading function in an extra cell", "cell", ISSUE_CHEAT, "not implemented yet"),
    ("replace the grading function, from the stub", "stub", ISSUE_CHEAT.replace("_g.grade_in_kernel = _fake", "_g.grade_notebook = _fake") +
     "def stable_softmax(scores):\n" + _ZEROS, "the checks and the grader are not importable while grading"),
    ("replace run_cases and recording with ones that always pass", "stub",
     "import deviating.exercises._core as c\nc.run_cases = lambda *a, **k: None\nc.recording = None\n"
     "def stable_softmax(scores):\n" + _ZEROS, "the checks and the grader are not importable while grading"),
    ("replace ExerciseFailed and CheckResult", "stub",
     "import deviating.exercises as e\nclass Never(Exception):\n    pass\ne.ExerciseFailed = Never\n"
     "e.CheckResult.n_passed = property(lambda self: self.total)\ndef stable_softmax(scores):\n" + _ZEROS,
     "its stub cell failed to run (AttributeError at line 5"),
    ("replace the check itself", "stub",
     "import deviating.exercises.ch00 as ch\nch.check_stable_softmax = lambda fn: None\n"
     "def stable_softmax(scores):\n" + _ZEROS, "the checks and the grader are not importable while grading"),
    ("patch json to write 'passed'", "stub",
     "import json\njson.dumps = lambda *a, **k: '{\"status\": \"passed\", \"passed\": 8, \"total\": 8}'\n"
     "json.loads = lambda *a, **k: {'status': 'passed', 'passed': 8, 'total': 8}\n"
     "def stable_softmax(scores):\n" + _ZEROS, "sent an answer the grader cannot read (a status 'passed')"),
    ("patch print and forge the grader's output lines", "stub",
     "import builtins\n_p = builtins.print\nbuiltins.print = lambda *a, **k: _p('HEADLAB-GRADE-0 {\"status\": \"passed\"}')\n"
     "def stable_softmax(scores):\n    print('✓ stable_softmax passed all 8 known-answer checks.')\n" + _ZEROS,
     "wrong on case 9 of 16"),
    ("replace sys.stdout with forged verdicts", "stub",
     "import io, sys\nclass Liar(io.StringIO):\n    def write(self, s):\n        return sys.__stdout__.write("
     "'{\"status\": \"passed\", \"passed\": 8, \"total\": 8}\\n')\nsys.stdout = sys.stderr = Liar()\n"
     "def stable_softmax(scores):\n    print('all passed')\n" + _ZEROS, "wrong on case 9 of 16"),
    ("numpy comparisons that always agree", "stub",
     "import numpy\nnumpy.allclose = lambda *a, **k: True\nnumpy.isclose = lambda a, b, **k: numpy.ones(numpy.shape(a), bool)\n"
     "numpy.array_equal = lambda *a, **k: True\nnumpy.testing.assert_allclose = lambda *a, **k: None\n"
     "def stable_softmax(scores):\n" + _ZEROS, "wrong on case 9 of 16"),
    ("torch comparisons that always agree, a tensor returned", "stub",
     "import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
     "def stable_softmax(scores):\n    return torch.zeros(np.shape(scores), dtype=torch.float64)", "wrong on case 9 of 16"),
    ("math.isclose always true", "stub",
     "import math\nmath.isclose = lambda *a, **k: True\ndef stable_softmax(scores):\n" + _ZEROS, "wrong on case 9 of 16"),
    # ---------------------------------------------------------------- returned objects that lie
    ("an object whose __eq__ is always true", "stub",
     "class Yes:\n    def __eq__(self, other):\n        return True\n    __ne__ = lambda self, other: False\n"
     "    shape = (4,)\ndef stable_softmax(scores):\n    return Yes()", "returned a __main__.Yes"),
    ("a float subclass that equals everything", "stub",
     "class F(float):\n    def __eq__(self, other):\n        return True\n    def __sub__(self, other):\n        return F(0.0)\n"
     "    __rsub__ = __sub__\n    def __abs__(self):\n        return F(0.0)\n    def __lt__(self, other):\n        return True\n"
     "    __le__ = __lt__\ndef stable_softmax(scores):\n    return np.array([F(0.0)] * np.shape(scores)[-1], dtype=object)",
     "an array of dtype object"),
    ("an __array__ that changes its answer each time it is read", "stub",
     "class Shifty:\n    n = 0\n    def __array__(self, dtype=None, copy=None):\n        Shifty.n += 1\n"
     "        return np.full(4, 0.25 * Shifty.n)\ndef stable_softmax(scores):\n    return Shifty()", "returned a __main__.Shifty"),
    ("an ndarray subclass whose comparisons always agree", "stub",
     "class Agree(np.ndarray):\n    def __eq__(self, other):\n        return np.ones(self.shape, bool)\n"
     "    def __array_ufunc__(self, *a, **k):\n        return np.zeros(self.shape)\n"
     "def stable_softmax(scores):\n    return np.zeros(np.shape(scores)).view(Agree)", "wrong on case 9 of 16"),
    ("NaN everywhere", "stub", "def stable_softmax(scores):\n    return np.full(np.shape(scores), np.nan)",
     "wrong on case 9 of 16"),
    # ---------------------------------------------------------------- reading the answer
    ("import the check module and look the case up", "stub",
     "def stable_softmax(scores):\n    from deviating.exercises import ch00\n    return ch00.np.zeros(1)",
     "raised ImportError at line 2 of the stub cell (module deviating.exercises)"),
    ("read the check's source file from disk", "stub",
     "SRC = open({checks!r}).read()\n"
     "def stable_softmax(scores):\n" + _ZEROS, "Refused"),
    ("walk the caller's frames for an expected value", "stub",
     "import sys\ndef stable_softmax(scores):\n    f = sys._getframe(1)\n    while f is not None:\n"
     "        for k, v in f.f_locals.items():\n            if 'expect' in k:\n                return v\n"
     "        f = f.f_back\n" + _ZEROS, "wrong on case 9 of 16"),
    ("search the heap for the check's cases", "stub",
     "import gc\ndef stable_softmax(scores):\n    cases = [o for o in gc.get_objects() if type(o).__name__ == 'Case']\n"
     "    return cases[0].expected", "raised Refused"),
    ("read a file outside the folder and put it in the error", "stub",
     "def stable_softmax(scores):\n    raise ValueError(open({secret!r}).read())", "raised Refused"),
    ("read a file outside the folder in the stub cell itself", "stub",
     "SECRET = open({secret!r}).read()\nraise ValueError(SECRET)\ndef stable_softmax(scores):\n" + _ZEROS,
     "its stub cell failed to run (Refused"),
    ("list the other submissions", "stub",
     "import os\nNAMES = os.listdir(os.path.dirname({other!r}))\ndef stable_softmax(scores):\n" + _ZEROS,
     "its stub cell failed to run (Refused"),
    # ---------------------------------------------------------------- the network (a second audit hook, added
    # after the worker's, would stop the call if the worker's let it through: no packet can leave either way)
    ("a UDP sendto to a public address", "stub", _SENTINEL +
     "def stable_softmax(scores):\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
     "    s.sendto(b'x', ('192.0.2.1', 9))\n" + _ZEROS, "no network during grading: socket.sendto"),
    ("a TCP connection to a public address", "stub", _SENTINEL +
     "def stable_softmax(scores):\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(('192.0.2.1', 80))\n" + _ZEROS,
     "no network during grading: socket.connect"),
    ("a name lookup", "stub", _SENTINEL + "def stable_softmax(scores):\n    socket.getaddrinfo('example.com', 80)\n" + _ZEROS,
     "no network during grading: the name lookup of example.com"),
    # ---------------------------------------------------------------- ending, hanging, flooding
    ("sys.exit in the stub cell", "stub", "import sys\nsys.exit(0)\ndef stable_softmax(scores):\n" + _ZEROS,
     "its stub cell failed to run (SystemExit"),
    ("sys.exit inside the function", "stub", "import sys\ndef stable_softmax(scores):\n    sys.exit(0)", "raised SystemExit"),
    ("os._exit inside the function", "stub", "import os\ndef stable_softmax(scores):\n    os._exit(0)",
     "the worker process exited (status 0"),
    ("a function that never returns", "stub",
     "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ndef stable_softmax(scores):\n    while True:\n        pass",
     "ran past the time limit"),
    ("a stub cell that never ends", "stub", "while True:\n    pass\ndef stable_softmax(scores):\n" + _ZEROS,
     "ran past the time limit"),
    ("a huge output", "stub",
     "import sys\ndef stable_softmax(scores):\n    for _ in range(200):\n        sys.stdout.write('x' * 1_000_000)\n"
     "        print('HEADLAB-GRADE-0 {\"status\": \"passed\"}')\n" + _ZEROS, "wrong on case 9 of 16"),
    ("a huge return value", "stub", "def stable_softmax(scores):\n    return np.zeros(2**25, dtype=np.uint8)",
     "returned an array of 33554432 elements (at most 16777216)"),
    ("write over the gradebook and another submission", "stub",
     "def stable_softmax(scores):\n    open({grades!r}, 'w').write('alice,8,8')\n    open({other!r}, 'w').write('{}')\n" + _ZEROS,
     "raised Refused at line 2 of the stub cell: writing"),
    ("a fork bomb", "stub", "import os\ndef stable_softmax(scores):\n    while True:\n        os.fork()",
     "raised Refused"),
    ("start a process", "stub",
     "import subprocess\ndef stable_softmax(scores):\n    subprocess.run(['python3', '-c', 'print(1)'])\n" + _ZEROS,
     "raised Refused"),
    ("start a thread that calls the library's answer", "stub",
     "import threading\ndef stable_softmax(scores):\n    threading.Thread(target=print).start()\n" + _ZEROS, "raised Refused"),
    # np.empty reserves address space without touching it, so the worker's RLIMIT_AS stops it in
    # microseconds on any machine; np.ones wrote 4 GB first and, on a loaded CI runner, met the 3 s
    # time limit before the memory limit (a zero either way, but for the wrong reason).
    ("exhaust the memory", "stub",
     "def stable_softmax(scores):\n    hoard = []\n    while True:\n        hoard.append(np.empty(2**24))",
     "MemoryError"),
    ("kill the grader", "stub", "import os, signal\ndef stable_softmax(scores):\n    os.kill(os.getppid(), signal.SIGKILL)\n" + _ZEROS,
     "raised Refused"),
    ("undo the library-answer guard, then call the library", "stub",
     "import sys\ndef stable_softmax(scores):\n    sys.setprofile(None)\n    from deviating.kernels.reference import softmax\n"
     "    return softmax(scores)", "raised Refused"),
    ("forge the worker's answer", "stub",
     "import sys, json\nw = sys.modules['__main__']\n"
     "w._answer = lambda fd, **p: w.write_frame(fd, json.dumps({'status': 'passed', 'passed': 8}).encode() + b'\\nnull')\n"
     "def stable_softmax(scores):\n" + _ZEROS, "sent an answer the grader cannot read"),
]

# ---------------------------------------------------------------- issue 40: what got past the audit hook, tried
# against the operating system's sandbox. ``{book!r}`` is the lecturer's notebook with the solutions (reading it
# and running its solution cell would give full marks), ``{checks!r}`` the check module's source,
# ``{grader_pid}`` the grader's process id, ``{table!r}`` the fixed cases' inputs and answers (as a student
# copies them at home), ``{marker}`` a string that names a left-over process.
_SOLVE = ("NB = json.loads(DATA)\nSOLVED = {'np': np}\n"
          "exec(next(''.join(c['source']) for c in NB['cells'] if 'solution' in c['metadata'].get('tags', [])), SOLVED)\n"
          "def stable_softmax(scores):\n    return SOLVED['stable_softmax'](scores)\n")

ISOLATION_CHEATS: list[tuple[str, str, str, str]] = [
    ("plant a symlink in the own folder and read the solutions through it (dir_fd)", "stub",
     "import os, json\nos.mkdir('a')\nos.symlink({book!r}, 'a/x')\nd = os.open('a', os.O_RDONLY)\n"
     "fd = os.open('x', os.O_RDONLY, dir_fd=d)\nDATA = os.read(fd, 10**7)\n" + _SOLVE,
     "its stub cell failed to run (FileNotFoundError at line 5 of the stub cell)"),
    ("read the check module's source through a planted symlink", "stub",
     "import os\nos.symlink({checks!r}, 'c.py')\nSRC = open('c.py').read()\ndef stable_softmax(scores):\n" + _ZEROS,
     "its stub cell failed to run (Refused at line 3"),
    ("torch.from_file reads the solutions (no audit event)", "stub",
     "import json, os, torch\nDATA = bytes(torch.from_file({book!r}, size=os.stat({book!r}).st_size, dtype=torch.uint8))\n"
     + _SOLVE, "its stub cell failed to run (FileNotFoundError at line 2"),
    ("torch.from_file reads /etc/passwd (no audit event)", "stub",
     "import torch\nPW = torch.from_file('/etc/passwd', size=16, dtype=torch.uint8)\ndef stable_softmax(scores):\n" + _ZEROS,
     "its stub cell failed to run (RuntimeError at line 2"),
    ("sqlite3 writes a file beside the gradebook (no audit event checked)", "stub",
     "import sqlite3\ncon = sqlite3.connect({grades!r} + '.db')\ncon.execute('create table t (x)')\ncon.commit()\n"
     "def stable_softmax(scores):\n" + _ZEROS, "its stub cell failed to run (OperationalError at line 2"),
    ("subprocess through a replaced sys (its audit event skipped)", "stub",
     "import json, subprocess, sys, types\nfake = types.SimpleNamespace(**vars(sys))\nfake.audit = lambda *a: None\n"
     "subprocess.sys = fake\nDATA = subprocess.run([sys.executable, '-c', 'import sys; sys.stdout.write(open(' + repr({book!r}) + ').read())'],"
     " capture_output=True).stdout\n" + _SOLVE, "its stub cell failed to run (JSONDecodeError at line 6"),
    ("multiprocessing.util.spawnv_passfds starts an unwatched child", "stub",
     "import json, os, sys\nfrom multiprocessing.util import spawnv_passfds\n"
     "pid = spawnv_passfds(os.fsencode(sys.executable), [sys.executable, '-c', 'import shutil; shutil.copy(' + repr({book!r}) + ', \"b.ipynb\")'], ())\n"
     "os.waitpid(pid, 0)\nDATA = open('b.ipynb').read()\n" + _SOLVE, "its stub cell failed to run (FileNotFoundError at line 5"),
    ("a setsid child outlives the worker and rewrites the gradebook", "stub",
     "import os, sys\nfrom multiprocessing.util import spawnv_passfds\n"
     "CHILD = 'import os, time\\nos.setsid()\\nfor _ in range(400):\\n    time.sleep(0.05)\\n    try:\\n"
     "        open(' + repr({grades!r}) + ', \"w\").write(\"cheat,8,8\")\\n    except OSError:\\n        pass'\n"
     "spawnv_passfds(os.fsencode(sys.executable), [sys.executable, '-c', CHILD, '{marker}'], ())\ndef stable_softmax(scores):\n" + _ZEROS,
     "wrong on case 9 of 16"),
    ("pidfd_send_signal kills the grader (no audit event)", "stub",
     "import os, signal\nfd = os.pidfd_open({grader_pid})\nsignal.pidfd_send_signal(fd, signal.SIGKILL)\n"
     "def stable_softmax(scores):\n" + _ZEROS, "its stub cell failed to run (PermissionError at line 2"),
    ("read the grader's environment through /proc (no audit event)", "stub",
     "import torch\nENV = torch.from_file('/proc/{grader_pid}/environ', size=16, dtype=torch.uint8)\n"
     "def stable_softmax(scores):\n" + _ZEROS, "its stub cell failed to run (RuntimeError at line 2"),
    # the library-call detector's five evasions: each needs the library's softmax, which is not in the worker's view
    ("detector evasion 1: call the library from a frame named <frozen importlib>", "stub",
     "from deviating.kernels.reference import softmax\nns = {}\n"
     "exec(compile('def call(f, x):\\n    return f(x)', '<frozen importlib._bootstrap>', 'exec'), ns)\n"
     "def stable_softmax(scores):\n    return ns['call'](softmax, scores)", "not importable while grading: deviating.kernels"),
    ("detector evasion 2: rename the library module's __name__", "stub",
     "import deviating.kernels.reference as r\nr.softmax.__globals__['__name__'] = 'mine'\n"
     "def stable_softmax(scores):\n    return r.softmax(scores)", "not importable while grading: deviating.kernels"),
    ("detector evasion 3: clear the detector's state one frame up", "stub",
     "import sys\ndef stable_softmax(scores):\n    f = sys._getframe(1)\n    f.f_locals.get('forbid_box', [()])[0] = ()\n"
     "    from deviating.kernels.reference import softmax\n    return softmax(scores)",
     "raised ModuleNotFoundError at line 5 of the stub cell (module deviating.kernels.reference)"),
    ("detector evasion 4: bind the library's answer in the stub cell, before the detector watches", "stub",
     "from deviating.kernels import reference\n_lib = reference.softmax\ndef stable_softmax(scores):\n    return _lib(scores)", "not importable while grading: deviating.kernels"),
    ("detector evasion 5: run the library's copied source under another name", "stub",
     "import deviating, os\nSRC = open(os.path.join(deviating.__path__[0], 'kernels', 'reference.py')).read()\nns = {'__name__': 'mine'}\n"
     "exec(SRC, ns)\ndef stable_softmax(scores):\n    return ns['softmax'](scores)",
     "its stub cell failed to run (FileNotFoundError at line 2"),  # the hidden teaching kernels are not in the view
    ("a table of the fixed cases' answers", "stub",
     "TABLE = {table!r}\ndef stable_softmax(scores):\n    for inputs, answer in TABLE:\n"
     "        if np.shape(scores) == np.shape(inputs) and np.allclose(scores, inputs):\n            return np.array(answer)\n"
     + _ZEROS, "wrong on case 9 of 16, a case drawn from the secret seed"),
]
