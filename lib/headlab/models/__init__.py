"""headlab's own small GPT (:mod:`~headlab.models.gpt`: readable, with an explicit attention
pattern; the architecture of every organism the book trains), the checkpoints saved in its format
and their verified loading (:mod:`~headlab.models.checkpoints`), and the witness op that makes
every forward of it visible to the head interface (:mod:`~headlab.models.witness`). The book's
training recipes and its planted model are the book's (``deviating.training``, ``deviating.planted``)."""
