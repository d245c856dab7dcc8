"""What the models read: the synthetic language that annotates itself (:mod:`~deviating.data.language`)
and the training
tasks of the book's models, each with its held-out evaluation: repeated random spans
(:mod:`~deviating.data.spans`), windows of the synthetic language (:mod:`~deviating.data.windows`) and
two relations at once (:mod:`~deviating.data.two_relations`); what their evaluations share is in
:mod:`~deviating.data.head_scores`. (The hand-annotated English set is a resource for any
English model: :mod:`headlab.english`.)"""
