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
of `MARGIN` (relative) for float rounding. A query whose pruning has not started after reading
`DENSE_FRACTION` of a score per passage is scored exhaustively instead.

The loops are compiled by numba (at the first search of a process) and release the GIL, so
searches from several threads run on several cores; each thread keeps its own scratch arrays
of one number per passage.
"""

from __future__ import annotations

import threading

import numba
import numpy as np

MARGIN = 1e-4
DENSE_FRACTION = 0.125


def column_maxima(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """max_d c(t, d) of each column t of the CSC score matrix (0 for an empty column)."""
    lengths = np.diff(indptr)
    out = np.zeros(len(lengths), dtype=np.float64)
    full = np.flatnonzero(lengths)
    if len(full):
        out[full] = np.maximum.reduceat(data, indptr[:-1][full])
    return out


@numba.njit(nogil=True, cache=True)
def _contribution(data, indices, indptr, term, doc):
    """c(term, doc), 0 when the term is absent (binary search in the column)."""
    low, high = indptr[term], indptr[term + 1]
    while low < high:
        mid = (low + high) // 2
        if indices[mid] < doc:
            low = mid + 1
        else:
            high = mid
    if low < indptr[term + 1] and indices[low] == doc:
        return data[low]
    return np.float32(0.0)


@numba.njit(nogil=True, cache=True)
def _kth(values, n, k):
    """The k-th largest of values[:n] (0 when n < k)."""
    if n < k:
        return 0.0
    return np.partition(values[:n].copy(), n - k)[n - k]


@numba.njit(nogil=True, cache=True)
def _best(docs, scores, n, k):
    """Indices into docs/scores of the k highest positive of scores[:n], equal scores by doc."""
    chosen = np.empty(min(k, n), dtype=np.int64)
    taken = np.zeros(n, dtype=np.bool_)
    m = 0
    for slot in range(len(chosen)):
        best = -1
        for i in range(n):
            if taken[i] or not scores[i] > 0:
                continue
            if best < 0 or scores[i] > scores[best] or (scores[i] == scores[best] and docs[i] < docs[best]):
                best = i
        if best < 0:
            break
        taken[best] = True
        chosen[slot] = best
        m += 1
    return chosen[:m]


@numba.njit(nogil=True, cache=True)
def _exhaustive(data, indices, indptr, ids, scores):
    """s(d) into `scores` (zeros on entry), summed as bm25s sums it (float32, token order)."""
    for t in ids:
        for p in range(indptr[t], indptr[t + 1]):
            scores[indices[p]] += data[p]


@numba.njit(nogil=True, cache=True)
def _dense_top(data, indices, indptr, ids, k, scores):
    """The exhaustive top k; `scores` is scratch of one float32 per passage, zeros on entry and exit.
    Passages in order, so a passage never displaces an equal score kept before it."""
    _exhaustive(data, indices, indptr, ids, scores)
    docs = np.zeros(k, dtype=np.int64)
    kept = np.zeros(k, dtype=np.float32)
    n = 0
    for d in range(len(scores)):
        s = scores[d]
        scores[d] = 0.0
        if not s > 0 or (n == k and not s > kept[k - 1]):
            continue
        i = min(n, k - 1)
        while i > 0 and kept[i - 1] < s:
            docs[i], kept[i] = docs[i - 1], kept[i - 1]
            i -= 1
        docs[i], kept[i] = d, s
        n = min(n + 1, k)
    return docs[:n], kept[:n]


@numba.njit(nogil=True, cache=True)
def _pruned_top(data, indices, indptr, ids, terms, counts, done, rest, k, budget, accumulator, seen, scores):
    """The top k by MaxScore (module doc); `accumulator` and `scores` are float32 scratch of one
    number per passage, zeros on entry and exit, `seen` a buffer of passages. `done[j]` and
    `rest[j]` are the bounds' sums over terms[:j + 1] and terms[j + 1:]."""
    n, read, j = 0, 0, 0
    while j < len(terms):
        t = terms[j]
        read += indptr[t + 1] - indptr[t]
        if read > budget:
            for i in range(n):
                accumulator[seen[i]] = 0.0
            return _dense_top(data, indices, indptr, ids, k, scores)
        for p in range(indptr[t], indptr[t + 1]):
            d = indices[p]
            if data[p] == 0:
                continue
            if accumulator[d] == 0.0:
                seen[n] = d
                n += 1
            accumulator[d] += counts[j] * data[p]
        j += 1
        if rest[j - 1] >= done[j - 1]:
            continue  # θ_j ≤ max p_j ≤ Σ_{t in T_j} u(t): pruning cannot start yet
        partial = np.empty(n, dtype=np.float64)
        for i in range(n):
            partial[i] = accumulator[seen[i]]
        if rest[j - 1] < _kth(partial, n, k) * (1 - MARGIN):
            break
    docs = seen[:n].copy()
    partial = np.empty(n, dtype=np.float64)
    for i in range(n):
        partial[i] = accumulator[docs[i]]
        accumulator[docs[i]] = 0.0
    for t in range(j, len(terms) + 1):
        theta = _kth(partial, n, k) * (1 - MARGIN)
        kept = 0
        for i in range(n):
            if partial[i] + rest[t - 1] >= theta:
                docs[kept], partial[kept] = docs[i], partial[i]
                kept += 1
        n = kept
        if t == len(terms):
            break
        for i in range(n):
            partial[i] += counts[t] * _contribution(data, indices, indptr, terms[t], docs[i])
    exact = np.zeros(n, dtype=np.float32)
    for term in ids:
        for i in range(n):
            exact[i] += _contribution(data, indices, indptr, term, docs[i])
    order = _best(docs, exact, n, k)
    return docs[order], exact[order]


class PrunedScorer:
    """The top k of token-id queries over bm25s's score matrix; thread-safe."""

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int):
        # plain views of memory-mapped arrays (numba reads them in place)
        self.data, self.indices, self.indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
        self.num_docs = int(num_docs)
        self.maxima = column_maxima(self.data, self.indptr)
        self._scratch = threading.local()

    def _buffers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not hasattr(self._scratch, "accumulator"):
            self._scratch.accumulator = np.zeros(self.num_docs, dtype=np.float32)
            self._scratch.scores = np.zeros(self.num_docs, dtype=np.float32)
            self._scratch.seen = np.empty(int(DENSE_FRACTION * self.num_docs) + 1, dtype=np.int64)
        return self._scratch.accumulator, self._scratch.seen, self._scratch.scores

    def exhaustive(self, ids: list[int]) -> np.ndarray:
        """s(d) for every passage, summed as bm25s sums it: the reference of `top`."""
        scores = np.zeros(self.num_docs, dtype=np.float32)
        _exhaustive(self.data, self.indices, self.indptr, np.asarray(ids, dtype=np.int64), scores)
        return scores

    def top(self, ids: list[int], k: int, budget: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Positions and scores of the k highest positive s(d), highest first, equal scores by
        position: the exhaustive top k (module doc). `budget`: the scores read before falling
        back to exhaustive scoring (default DENSE_FRACTION of the passages)."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        terms, counts = np.unique(ids, return_counts=True)
        bounds = counts * self.maxima[terms]
        order = np.argsort(-bounds, kind="stable")
        terms, counts, bounds = terms[order], counts[order].astype(np.float64), bounds[order]
        rest = np.append(np.cumsum(bounds[::-1])[::-1][1:], 0.0) * (1 + MARGIN)
        done = np.cumsum(bounds)
        budget = int(DENSE_FRACTION * self.num_docs) if budget is None else budget
        accumulator, seen, scores = self._buffers()
        if len(seen) <= budget:
            seen = np.empty(budget + 1, dtype=np.int64)
        return _pruned_top(
            self.data, self.indices, self.indptr, ids, terms, counts, done, rest, k, budget, accumulator, seen, scores
        )
