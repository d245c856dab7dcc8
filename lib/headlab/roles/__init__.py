"""One definition per role a head is said to play, used by every chapter, the report and the exercises.

Each role is one function in its own module, with its threshold, its baseline or null, and the
split it selects heads on and the split it measures them on, all stated in its docstring; each
takes a model and its inputs and returns every number behind its answer, so a notebook can print
it and the checklist report can judge it:

* :mod:`~headlab.roles.positional` -- previous-token heads (and any fixed offset or
  position: next-token, first-token), against a null of decoy keys;
* :mod:`~headlab.roles.syntactic` -- subject and antecedent heads, against ground truth
  and the best fixed offset or nearest-mention baseline;
* :mod:`~headlab.roles.orphan` -- orphan heads: no named pattern, a measured effect
  above the mean head's on the metric given;
* :mod:`~headlab.roles.induction` -- induction heads, both halves (the attention
  pattern, as a held-out lift over uniform attention, and the copying through the OV circuit),
  and how much of their score removing another head takes.

Import a role from its module, e.g. ``from headlab.roles.orphan import orphan_heads``.
The checklist report calls these same functions, and the atlas's labels
(:func:`headlab.analysis.detect.label_heads`) name a head at the roles' own bars (previous-token
0.4, induction 0.3): a label is a role's test on the atlas's texts, in sample; the role adds the
held-out split, its null and, for induction, the copying half.
"""
