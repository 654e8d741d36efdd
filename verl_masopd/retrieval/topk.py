"""The exact BM25 top k of a query without scoring every passage (term-at-a-time MaxScore).

bm25s stores the BM25 score matrix column by column (CSC): column t holds, for every passage d
that contains term t, its contribution c(t, d) > 0, rows in passage order. A query's exhaustive
score is s(d) = Σ_{t in query} c(t, d), summed in float32 in the query's token order (a repeated
token counts each time), and its top k are the k highest positive s(d), equal scores by position.

With u(t) = m(t) · max_d c(t, d) (m(t): how often t occurs in the query) the terms are taken by
decreasing u. After the terms T_j = {t_1..t_j}, the partial sums p_j(d) = Σ_{t in T_j} m(t)·c(t, d)
are lower bounds of s(d), so θ_j, the k-th largest p_j, is at most the true k-th score; a passage
that has none of T_j scores at most R_j = Σ_{t not in T_j} u(t). Once R_j < θ_j no such passage
can reach the top k: the candidates are the passages already seen, and each further term only
adds to them (looked up by binary search in its column) while the candidates with
p(d) + R < θ are dropped. The survivors' scores are then summed exactly as the exhaustive
scoring sums them, so the result is the exhaustive top k to the last bit. Bounds carry a margin
of `MARGIN` (relative) for float rounding. A query whose pruning never starts before it has
read `DENSE_FRACTION` of a score per passage is scored exhaustively instead.
"""

from __future__ import annotations

import numpy as np

MARGIN = 1e-4
DENSE_FRACTION = 0.125
# Entries of a score array sampled to bound its k-th best score from below.
TOPK_SAMPLE = 4096


def best_positive(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the `k` highest positive scores, highest first, equal scores by position.

    The k-th highest score of any subset is at most that of the whole array, so the k-th highest
    of an evenly spaced sample leaves only the few candidates at or above it to sort (a full
    partition of a million scores costs as much as scoring the query)."""
    sample = scores[:: max(1, len(scores) // TOPK_SAMPLE)]
    floor = np.partition(sample, -k)[-k] if len(sample) >= k else 0.0
    candidates = np.flatnonzero(scores >= floor) if floor > 0 else np.flatnonzero(scores > 0)
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order[:k]]


def column_maxima(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """max_d c(t, d) of each column t of the CSC score matrix (0 for an empty column)."""
    lengths = np.diff(indptr)
    out = np.zeros(len(lengths), dtype=np.float64)
    full = np.flatnonzero(lengths)
    if len(full):
        out[full] = np.maximum.reduceat(data, indptr[:-1][full])
    return out


class PrunedScorer:
    """The top k of token-id queries over bm25s's score matrix; `exhaustive(ids)` is the score of
    every passage, the reference it must agree with."""

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int, maxima=None):
        # plain views of memory-mapped arrays: slicing a np.memmap costs more than the work here
        self.data, self.indices, self.indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
        self.num_docs = int(num_docs)
        self.maxima = column_maxima(self.data, self.indptr) if maxima is None else maxima

    def _column(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        start, end = self.indptr[term], self.indptr[term + 1]
        return self.indices[start:end], self.data[start:end]

    def _lookup(self, term: int, docs: np.ndarray) -> np.ndarray:
        """c(term, d) for each of the sorted passages `docs`, 0 where the term is absent (float32)."""
        rows, values = self._column(term)
        if not len(rows):
            return np.zeros(len(docs), dtype=np.float32)
        at = np.minimum(np.searchsorted(rows, docs), len(rows) - 1)
        return np.where(rows[at] == docs, values[at], np.float32(0))

    def exhaustive(self, ids: list[int]) -> np.ndarray:
        """s(d) for every passage, summed as bm25s sums it (float32, token order; a column's rows
        are distinct, so a scatter add is exact)."""
        scores = np.zeros(self.num_docs, dtype=np.float32)
        for term in ids:
            rows, values = self._column(term)
            scores[rows] += values
        return scores

    def _kth(self, partial: np.ndarray, k: int) -> float:
        return float(np.partition(partial, -k)[-k]) if len(partial) >= k else 0.0

    def candidates(self, ids: list[int], k: int) -> np.ndarray | None:
        """The passages that can be in the top k, sorted; None when pruning does not pay (module doc)."""
        terms, counts = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)
        bounds = counts * self.maxima[terms]
        order = np.argsort(-bounds, kind="stable")
        terms, counts, bounds = terms[order], counts[order], bounds[order]
        rest = np.concatenate([np.cumsum(bounds[::-1])[::-1][1:], [0.0]]) * (1 + MARGIN)
        budget, read = DENSE_FRACTION * self.num_docs, 0
        docs = np.zeros(0, dtype=self.indices.dtype)
        partial = np.zeros(0, dtype=np.float64)
        j = 0
        while j < len(terms):
            rows, values = self._column(terms[j])
            read += len(rows)
            if read > budget:
                return None
            merged = np.concatenate([docs, rows])
            docs, where = np.unique(merged, return_inverse=True)
            weights = np.concatenate([partial, counts[j] * values.astype(np.float64)])
            partial = np.bincount(where, weights=weights, minlength=len(docs))
            j += 1
            if rest[j - 1] < self._kth(partial, k) * (1 - MARGIN):
                break
        for t in range(j, len(terms)):
            theta = self._kth(partial, k) * (1 - MARGIN)
            keep = partial + rest[t - 1] >= theta
            docs, partial = docs[keep], partial[keep]
            partial = partial + counts[t] * self._lookup(terms[t], docs).astype(np.float64)
        theta = self._kth(partial, k) * (1 - MARGIN)
        return docs[partial >= theta]

    def top(self, ids: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions and scores of the k highest positive s(d), highest first, equal scores by
        position: the exhaustive top k (module doc)."""
        docs = self.candidates(ids, k)
        if docs is None:
            scores = self.exhaustive(ids)
            best = best_positive(scores, k)
            return best, scores[best]
        scores = np.zeros(len(docs), dtype=np.float32)
        for term in ids:
            scores += self._lookup(term, docs)
        positive = scores > 0
        docs, scores = docs[positive], scores[positive]
        order = np.lexsort((docs, -scores))[:k]
        return docs[order], scores[order]
