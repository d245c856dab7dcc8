"""One definition per role a head is said to play, used by every chapter, the report and the exercises.

Each role is one function in its own module, with its threshold, its baseline or null, and the
split it selects heads on and the split it measures them on, all stated in its docstring:

* :mod:`~headlab.analysis.roles.positional` -- previous-token heads;
* :mod:`~headlab.analysis.roles.induction` -- induction heads, both halves: the attention pattern
  (to the token after an earlier occurrence of the current token) *and* the copying through OV;
* :mod:`~headlab.analysis.roles.syntactic` -- subject (and antecedent) heads, against ground truth;
* :mod:`~headlab.analysis.roles.orphan` -- orphan heads: no named pattern, a measured task effect.

Import a role from its module, e.g. ``from headlab.analysis.roles.induction import induction_heads``.
"""
