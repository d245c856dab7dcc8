"""What the models read: the synthetic language that annotates itself (:mod:`~headlab.data.language`),
the hand-annotated English set (``english.jsonl``, see ``README.md`` beside it), and the training
tasks of the book's models (:mod:`~headlab.data.tasks`, :mod:`~headlab.data.two_relations`)."""
