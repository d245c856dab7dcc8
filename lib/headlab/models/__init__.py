"""The book's own models: the GPT it trains (:mod:`~headlab.models.gpt`), its shipped checkpoints,
and the planted model whose heads are set by hand (:mod:`~deviating.planted`)."""
