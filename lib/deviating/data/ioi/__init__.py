"""The indirect-object task (Wang et al. 2022) on real English: first names kept whole by the
tokenizer (:mod:`~deviating.data.ioi.names`), templated sentences with their ground truth
(:mod:`~deviating.data.ioi.sentences`), token-level prompts and their corrupted twins
(:mod:`~deviating.data.ioi.prompts`), and the training windows of the model that learns the task
(:mod:`~deviating.data.ioi.windows`)."""
