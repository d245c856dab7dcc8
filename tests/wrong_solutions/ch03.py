"""Wrong solutions students really write for the exercises of chapter 03."""

from __future__ import annotations

import numpy as np


def punct_all_queries(pattern, is_punct):
    return float(np.mean([pattern[i, : i + 1][is_punct[: i + 1]].sum() for i in range(len(is_punct))]))


def punct_max_not_sum(pattern, is_punct):
    w = [pattern[i, : i + 1][is_punct[: i + 1]].max() for i in range(len(is_punct)) if is_punct[: i + 1].any()]
    return float(np.mean(w))


def punct_not_causal(pattern, is_punct):
    return float(np.mean([pattern[i][is_punct].sum() for i in range(len(is_punct))]))


def punct_first_key_only(pattern, is_punct):
    first = int(np.argmax(is_punct))
    return float(np.mean([pattern[i, first] for i in range(first, len(is_punct))]))


def sink_sharpest_entry(patterns):
    return int(np.unravel_index(np.argmax(patterns), patterns.shape)[-1])


def sink_last_layer(patterns):
    return int(patterns[-1].sum(axis=(0, 1)).argmax())


def sink_first_layer(patterns):
    return int(patterns[0].sum(axis=(0, 1)).argmax())


def sink_wrong_axis(patterns):
    return int(patterns.sum(axis=(0, 1, 3)).argmax())


CATALOGUE: dict[str, list] = {
    "ex-03-punctuation": [punct_all_queries, punct_max_not_sum, punct_not_causal, punct_first_key_only],
    "ex-03-sink": [sink_sharpest_entry, sink_last_layer, sink_first_layer, sink_wrong_axis],
}
