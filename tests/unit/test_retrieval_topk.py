"""The pruned top k (retrieval/topk.py) against exhaustive scoring of every passage, on a bm25s
index of made-up passages whose words follow a Zipf law (so that queries mix rare and common
words, and ties are common): the same passages in the same order with bit-equal scores as bm25s's
own scoring of every passage."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest

from verl_masopd.retrieval.topk import PrunedScorer, column_maxima

WORDS = [f"w{i}" for i in range(3000)]


@pytest.fixture(scope="module")
def scorer():
    rng = np.random.default_rng(0)
    weights = 1.0 / np.arange(1, len(WORDS) + 1) ** 1.1
    drawn = rng.choice(len(WORDS), size=(4000, 30), p=weights / weights.sum())
    lengths = rng.integers(5, 31, size=len(drawn))
    corpus = [[WORDS[w] for w in row[:n]] for row, n in zip(drawn, lengths, strict=True)]
    bm25 = bm25s.BM25(method="lucene", k1=0.9, b=0.4)
    bm25.index(bm25s.tokenization.Tokenized(*_ids(corpus)), show_progress=False)
    m = bm25.scores
    return PrunedScorer(m["data"], m["indices"], m["indptr"], m["num_docs"]), bm25, rng


def _ids(corpus):
    vocab = {w: i for i, w in enumerate(sorted({w for doc in corpus for w in doc}))}
    return [[vocab[w] for w in doc] for doc in corpus], vocab


def reference(bm25: bm25s.BM25, ids: list[int], k: int):
    """bm25s's own scoring of every passage, fully sorted."""
    scores = bm25.get_scores_from_ids(ids)
    order = sorted(np.flatnonzero(scores > 0).tolist(), key=lambda d: (-scores[d], d))[:k]
    return order, scores[order]


def test_the_pruned_top_k_is_the_exhaustive_one(scorer):
    scorer, bm25, rng = scorer
    terms = len(scorer.indptr) - 1
    common = np.argsort(-np.diff(scorer.indptr))[:6].tolist()
    queries = [common, common[:1] * 3] + [rng.integers(0, terms, size=rng.integers(1, 9)).tolist() for _ in range(400)]
    for ids in queries:  # random words, rare and common mixed, repeats allowed as in a real query
        for k in (1, 3, 10, 50):
            docs, scores = scorer.top(ids, k)
            expected_docs, expected_scores = reference(bm25, ids, k)
            assert docs.tolist() == expected_docs
            assert scores.tobytes() == np.asarray(expected_scores, dtype=np.float32).tobytes()
    assert [x.tolist() for x in scorer.top([], 3)] == [[], []]
    assert scorer.exhaustive(queries[1]).tobytes() == bm25.get_scores_from_ids(queries[1]).tobytes()


def test_column_maxima_by_hand():
    data = np.array([0.5, 2.0, 1.0, 3.0, 0.25], dtype=np.float32)
    indptr = np.array([0, 2, 2, 4, 5])  # columns [0.5, 2.0], [], [1.0, 3.0], [0.25]
    assert column_maxima(data, indptr).tolist() == [2.0, 0.0, 3.0, 0.25]
