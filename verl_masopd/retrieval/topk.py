"""The exact BM25 top k of a query without scoring every passage (document-at-a-time MaxScore).

bm25s stores the BM25 score matrix column by column (CSC): column t holds, for every passage d
that contains term t, its contribution c(t, d) > 0, rows in passage order. A query's exhaustive
score is s(d) = Σ_{t in query} c(t, d), summed in float32 in the query's token order (a repeated
token counts each time), and its top k are the k highest positive s(d), equal scores by position.

With m(t) how often t occurs in the query and u(t) = m(t) · max_d c(t, d), the query's distinct
terms are ordered by increasing u: t_1 .. t_n, and B_i = u(t_1) + .. + u(t_i) (B_0 = 0). The
passages are visited in increasing position, keeping the k best exact scores so far; θ, the k-th
of them (0 before k are found), only rises. A passage whose terms are all among t_1..t_e scores at
most B_e, so once B_e < θ those terms are non-essential: only passages in the columns of the
essential terms t_{e+1}..t_n are visited (their columns walked in step, like a merge). For a
visited passage d with partial sum p over its essential terms, the non-essential terms are looked
up from t_e down (galloping forward in their columns, which only move forward), and d is dropped
as soon as p + B_i < θ, with t_1..t_i still unread. A passage that survives has every
contribution read; its score is summed exactly as the exhaustive scoring sums it and enters the
top k when it beats the k-th (a later passage never displaces an equal score). The result is the
exhaustive top k to the last bit. Bounds are compared with θ (1 − `MARGIN`), a relative margin
for float rounding.

The loop is compiled by numba (at the first search of a process, then cached on disk) and
releases the GIL, so searches from several threads run on several cores; a search keeps no
scratch beyond a few numbers per query term.
"""

from __future__ import annotations

import numba
import numpy as np

MARGIN = 1e-4


def column_maxima(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """max_d c(t, d) of each column t of the CSC score matrix (0 for an empty column)."""
    lengths = np.diff(indptr)
    out = np.zeros(len(lengths), dtype=np.float64)
    full = np.flatnonzero(lengths)
    if len(full):
        out[full] = np.maximum.reduceat(data, indptr[:-1][full])
    return out


@numba.njit(nogil=True, cache=True)
def _seek(indices, low, high, doc):
    """The first position in [low, high) whose passage is >= doc (galloping, then binary search)."""
    step = 1
    while low + step < high and indices[low + step] < doc:
        low += step
        step *= 2
    high = min(high, low + step + 1)
    while low < high:
        mid = (low + high) // 2
        if indices[mid] < doc:
            low = mid + 1
        else:
            high = mid
    return low


@numba.njit(nogil=True, cache=True)
def _exhaustive(data, indices, indptr, ids, scores):
    """s(d) into `scores` (zeros on entry), summed as bm25s sums it (float32, token order)."""
    for t in ids:
        for p in range(indptr[t], indptr[t + 1]):
            scores[indices[p]] += data[p]


@numba.njit(nogil=True, cache=True)
def _maxscore_top(data, indices, indptr, terms, counts, bounds, slots, k):
    """The top k by MaxScore (module doc): `terms` by increasing bound u, `counts` their m(t),
    `slots` the position in `terms` of each query token, in token order."""
    n_terms = len(terms)
    below = np.zeros(n_terms + 1)  # below[i] = B_i
    for i in range(n_terms):
        below[i + 1] = below[i] + bounds[i]
    pos = np.empty(n_terms, dtype=np.int64)
    end = np.empty(n_terms, dtype=np.int64)
    for i in range(n_terms):
        pos[i], end[i] = indptr[terms[i]], indptr[terms[i] + 1]
    contribution = np.zeros(n_terms, dtype=np.float32)
    top_docs = np.zeros(k, dtype=np.int64)
    top_scores = np.zeros(k, dtype=np.float32)
    found = 0
    cut = 0.0  # θ (1 - MARGIN)
    first = 0  # t_1 .. t_first are non-essential: B_first < cut
    while True:
        doc = -1
        for i in range(first, n_terms):
            if pos[i] < end[i] and (doc < 0 or indices[pos[i]] < doc):
                doc = indices[pos[i]]
        if doc < 0:
            break
        partial = 0.0
        for i in range(first, n_terms):
            contribution[i] = 0.0
            if pos[i] < end[i] and indices[pos[i]] == doc:
                contribution[i] = data[pos[i]]
                partial += counts[i] * data[pos[i]]
                pos[i] += 1
        i = first - 1
        while i >= 0 and partial + below[i + 1] >= cut:
            pos[i] = _seek(indices, pos[i], end[i], doc)
            contribution[i] = 0.0
            if pos[i] < end[i] and indices[pos[i]] == doc:
                contribution[i] = data[pos[i]]
                partial += counts[i] * data[pos[i]]
            i -= 1
        if i >= 0 or partial < cut:
            continue
        score = np.float32(0.0)
        for slot in slots:
            score += contribution[slot]
        if not score > 0 or (found == k and not score > top_scores[k - 1]):
            continue
        x = min(found, k - 1)
        while x > 0 and top_scores[x - 1] < score:
            top_docs[x], top_scores[x] = top_docs[x - 1], top_scores[x - 1]
            x -= 1
        top_docs[x], top_scores[x] = doc, score
        found = min(found + 1, k)
        if found == k:
            cut = top_scores[k - 1] * (1 - MARGIN)
            while first < n_terms and below[first + 1] < cut:
                first += 1
    return top_docs[:found], top_scores[:found]


class PrunedScorer:
    """The top k of token-id queries over bm25s's score matrix; thread-safe."""

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int):
        # plain views of memory-mapped arrays (numba reads them in place)
        self.data, self.indices, self.indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
        self.num_docs = int(num_docs)
        self.maxima = column_maxima(self.data, self.indptr)

    def exhaustive(self, ids: list[int]) -> np.ndarray:
        """s(d) for every passage, summed as bm25s sums it: the reference of `top`."""
        scores = np.zeros(self.num_docs, dtype=np.float32)
        _exhaustive(self.data, self.indices, self.indptr, np.asarray(ids, dtype=np.int64), scores)
        return scores

    def top(self, ids: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions and scores of the k highest positive s(d), highest first, equal scores by
        position: the exhaustive top k (module doc)."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        terms, slots, counts = np.unique(ids, return_inverse=True, return_counts=True)
        bounds = counts * self.maxima[terms]
        order = np.argsort(bounds, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        return _maxscore_top(
            self.data,
            self.indices,
            self.indptr,
            terms[order],
            counts[order].astype(np.float64),
            bounds[order],
            rank[slots],
            k,
        )
