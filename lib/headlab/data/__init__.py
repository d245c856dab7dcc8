"""What the models read: the synthetic language that annotates itself (:mod:`~headlab.data.language`),
the hand-annotated English set (``english.jsonl``, see ``README.md`` beside it), and the training
tasks of the book's models, each with its held-out evaluation: repeated random spans
(:mod:`~headlab.data.spans`), windows of the synthetic language (:mod:`~headlab.data.windows`) and
two relations at once (:mod:`~headlab.data.two_relations`); what their evaluations share is in
:mod:`~headlab.data.head_scores`."""
