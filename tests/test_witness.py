"""The witness's registry must survive a model dying at any moment: a weak reference's callback
runs inside whatever allocation triggers the garbage collection, also while the registry's lock
is held by the same thread. A callback that took the lock hung the test suite (seen once, in a
deep copy of a HeadModel inside an exercise check)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gc, torch
    from headlab.models import witness

    class Watcher:
        def seen(self):
            self.n = getattr(self, "n", 0) + 1

    keep, w = torch.nn.Linear(2, 2), Watcher()
    witness.watch(keep, w.seen)
    doomed = torch.nn.Linear(2, 2)
    witness.watch(doomed, w.seen)
    token = doomed.witness_token
    with witness._LOCK:  # as inside watch() or claim(), when a collection frees a watched model
        del doomed
        gc.collect()
    assert token in witness._WATCHERS  # not yet purged: the callback only noted it
    witness.watch(torch.nn.Linear(2, 2), w.seen)  # the next registration purges it
    assert token not in witness._WATCHERS, witness._WATCHERS
    assert keep.witness_token in witness._WATCHERS
    print("ok")
""")


def test_a_model_dying_while_the_registry_is_locked_does_not_deadlock():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
