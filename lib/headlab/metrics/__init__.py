"""Per-input metrics that ablations and gradients are measured with.

Every metric maps a model output and its batch to one number **per input**
(shape ``(batch,)``): roles are conditional, so nothing is averaged away before
the reader asks for an average.

* Causal language models: :func:`next_token_loss`, the mean cross-entropy of
  predicting token ``t+1`` from the prefix up to ``t``, over real (non-padding)
  positions, optionally restricted by a ``loss_mask``.
* Encoders such as MiniLM have no language-model head. Two documented choices:
  :func:`cosine_distance` (1 - cosine similarity between the mean-pooled
  sentence embedding and the clean one; 0 for the clean model, so its gradient
  at the clean point is exactly zero), and :func:`retrieval_loss` (can the
  embedding still pick its own clean sentence out of the batch? an InfoNCE loss
  with a stated temperature, which has a non-zero gradient at the clean point
  and so serves gradient importance).
* A causal LM's logits at one position (:class:`LogitMetric`): a logit difference (one token pair
  for every input, or one pair per input), a probability, or the KL divergence from the clean run.
* Annotated items (:class:`ItemMetric`): at position ``pos`` of window ``doc`` the model should
  prefer one token over others; the accuracy or the logit margin, averaged per window.

What a measurement scores is passed as one :class:`Metric` value: a named kind (``"loss"``,
``"cosine"``, ``"retrieval"``, ``"kl"``) or any callable ``metric(output, batch) -> (rows,)``, and the
``loss_mask`` of the next-token loss::

    sweep(hm, inputs, metric=Metric("loss", loss_mask=on_repeats))
    # a callable is wrapped as Metric(it)
    items = ItemMetric(doc, pos, correct, competitors, n_windows)
    sweep(hm, windows, metric=items)

:meth:`Metric.score` is the one place a named kind becomes numbers; every measurement calls it.
"""

from headlab.metrics.functions import cosine_distance, mean_pool, next_token_loss, positions, retrieval_loss
from headlab.metrics.items import ItemMetric
from headlab.metrics.logits import LOGIT_SCORES, LogitMetric
from headlab.metrics.metric import METRIC_KINDS, Metric, default_kind

__all__ = ["Metric", "METRIC_KINDS", "default_kind", "next_token_loss", "mean_pool", "cosine_distance", "positions",
           "retrieval_loss", "LogitMetric", "LOGIT_SCORES", "ItemMetric"]
