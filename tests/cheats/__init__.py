"""The cheat catalogue of tests/test_cheats.py: what a student who wants the points without the work tries.

Each entry is ``(name, where, source, reason)``: ``where`` is ``"stub"`` (the source replaces the
stub of ``stable_softmax``, chapter 0's exercise, so it runs in the grading worker) or ``"cell"``
(an extra cell after the untouched stub: the grader never runs it); ``reason`` is a piece of the
reason the grade must give. Every cheat must score 0, with that reason, and the grader must go on.
``{secret!r}``, ``{grades!r}`` and ``{other!r}`` are replaced by the test (a file outside the
submission's folder holding a secret, the gradebook, another student's submission).
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
     "def stable_softmax(scores):\n" + _ZEROS, "its stub cell failed to run (Refused"),
    ("replace run_cases and recording with ones that always pass", "stub",
     "import deviating.exercises._core as c\nc.run_cases = lambda *a, **k: None\nc.recording = None\n"
     "def stable_softmax(scores):\n" + _ZEROS, "wrong on case 1 of 8"),
    ("replace ExerciseFailed and CheckResult", "stub",
     "import deviating.exercises as e\nclass Never(Exception):\n    pass\ne.ExerciseFailed = Never\n"
     "e.CheckResult.n_passed = property(lambda self: self.total)\ndef stable_softmax(scores):\n" + _ZEROS,
     "wrong on case 1 of 8"),
    ("replace the check itself", "stub",
     "import deviating.exercises.ch00 as ch\nch.check_stable_softmax = lambda fn: None\n"
     "def stable_softmax(scores):\n" + _ZEROS, "its stub cell failed to run (Refused"),
    ("patch json to write 'passed'", "stub",
     "import json\njson.dumps = lambda *a, **k: '{\"status\": \"passed\", \"passed\": 8, \"total\": 8}'\n"
     "json.loads = lambda *a, **k: {'status': 'passed', 'passed': 8, 'total': 8}\n"
     "def stable_softmax(scores):\n" + _ZEROS, "sent an answer the grader cannot read (a status 'passed')"),
    ("patch print and forge the grader's output lines", "stub",
     "import builtins\n_p = builtins.print\nbuiltins.print = lambda *a, **k: _p('HEADLAB-GRADE-0 {\"status\": \"passed\"}')\n"
     "def stable_softmax(scores):\n    print('✓ stable_softmax passed all 8 known-answer checks.')\n" + _ZEROS,
     "wrong on case 1 of 8"),
    ("replace sys.stdout with forged verdicts", "stub",
     "import io, sys\nclass Liar(io.StringIO):\n    def write(self, s):\n        return sys.__stdout__.write("
     "'{\"status\": \"passed\", \"passed\": 8, \"total\": 8}\\n')\nsys.stdout = sys.stderr = Liar()\n"
     "def stable_softmax(scores):\n    print('all passed')\n" + _ZEROS, "wrong on case 1 of 8"),
    ("numpy comparisons that always agree", "stub",
     "import numpy\nnumpy.allclose = lambda *a, **k: True\nnumpy.isclose = lambda a, b, **k: numpy.ones(numpy.shape(a), bool)\n"
     "numpy.array_equal = lambda *a, **k: True\nnumpy.testing.assert_allclose = lambda *a, **k: None\n"
     "def stable_softmax(scores):\n" + _ZEROS, "wrong on case 1 of 8"),
    ("torch comparisons that always agree, a tensor returned", "stub",
     "import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
     "def stable_softmax(scores):\n    return torch.zeros(np.shape(scores), dtype=torch.float64)", "wrong on case 1 of 8"),
    ("math.isclose always true", "stub",
     "import math\nmath.isclose = lambda *a, **k: True\ndef stable_softmax(scores):\n" + _ZEROS, "wrong on case 1 of 8"),
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
     "def stable_softmax(scores):\n    return np.zeros(np.shape(scores)).view(Agree)", "wrong on case 1 of 8"),
    ("NaN everywhere", "stub", "def stable_softmax(scores):\n    return np.full(np.shape(scores), np.nan)",
     "wrong on case 1 of 8"),
    # ---------------------------------------------------------------- reading the answer
    ("import the check module and look the case up", "stub",
     "def stable_softmax(scores):\n    from deviating.exercises import ch00\n    return ch00.np.zeros(1)",
     "raised Refused at line 2 of the stub cell: reading"),
    ("read the check's source file from disk", "stub",
     "import deviating.exercises, os\nSRC = open(os.path.join(os.path.dirname(deviating.exercises.__file__), 'ch00.py')).read()\n"
     "def stable_softmax(scores):\n" + _ZEROS, "Refused"),
    ("walk the caller's frames for an expected value", "stub",
     "import sys\ndef stable_softmax(scores):\n    f = sys._getframe(1)\n    while f is not None:\n"
     "        for k, v in f.f_locals.items():\n            if 'expect' in k:\n                return v\n"
     "        f = f.f_back\n" + _ZEROS, "wrong on case 1 of 8"),
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
     "        print('HEADLAB-GRADE-0 {\"status\": \"passed\"}')\n" + _ZEROS, "wrong on case 1 of 8"),
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
