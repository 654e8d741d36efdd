"""Retrieval throughput of the BM25 index (verl_masopd/retrieval): build and load seconds, index
size, and queries per second, in-process and through the project's HTTP server.

Corpora: a wiki-18 corpus file (--sample, e.g. the 1,000-passage sample of FlashRAG's quick
start) and synthetic corpora of --sizes passages (a title of two words, then 100 words drawn from
a Zipf-distributed vocabulary of 50,000 made-up words). Queries: 6 consecutive words of randomly
chosen passages (so each has matches), the same queries for every measurement of a corpus; with
--questions (a JSONL of {"question": ...}, e.g. NQ-open's), the sample is also searched with those
questions as they are, as a Searcher would send them. Measured: one query per call, from 1 and
from 2 threads (wall clock, the process's CPU seconds per query, and queries per CPU second of the
process, which the other jobs of a shared machine inflate far less than wall time; the load
average before and after each measurement is recorded), batches of 64 queries per call, and over
HTTP one query per request from 1 and from 8 client threads (the server serves every rollout
worker). The index's search (retrieval/topk.py, pruned) is checked against
bm25s's own scoring of every passage (the search before pruning, one query per call, also timed): the
share of queries whose top 3 are the same passages with the same scores. Peak RSS is the process's
maximum so far, read after each build. second_build_reuse_s is a second `build_index` of the same
corpus (its digest checked, the index kept); load_mmap_s opens the index memory-mapped (and finds
each term's highest score), first_search_s is the first search of the process (numba compiles the
scorer, or loads it from its cache).

--built measures index folders built before (e.g. by `python -m verl_masopd.retrieval index` on a
corpus this script wrote) as they are, their build seconds read from their manifest.
--scale DIR --repeat 2 4 measures the scorer alone at 2 and 4 times the passages of the index DIR
when building a larger index does not fit in memory: its score matrix with every passage repeated
that many times (each column's postings tiled, so every term is in r times the passages, as in a
corpus r times the size with the same word statistics), the same queries' token ids, their top 3
checked against scoring every passage of the tiled matrix.

Usage: python benchmarks/retrieval_throughput.py [--sample FILE] [--sizes 100000 1000000]
       [--built DIR ...] [--questions FILE] [--scale DIR --repeat 2 4] [--queries 500]
       [--workdir DIR] [--name NAME]
Writes benchmarks/results/NAME.json (default retrieval_throughput) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from results_file import save_result

from verl_masopd.retrieval import BM25Index, RetrievalServer, SearchClient, build_index
from verl_masopd.retrieval.topk import PrunedScorer

VOCABULARY = 50_000
WORDS_PER_PASSAGE = 100
QUERY_WORDS = 6
BATCH = 64
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def made_up_words(count: int) -> list[str]:
    """`count` distinct lower-case words of three syllables and more."""
    words, n = [], 0
    while len(words) < count:
        digits, value = [], n
        for _ in range(3):
            value, digit = divmod(value, len(SYLLABLES))
            digits.append(SYLLABLES[digit])
        words.append("".join(digits) + (SYLLABLES[value % len(SYLLABLES)] if value else ""))
        n += 1
    return words


def write_synthetic_corpus(path: Path, passages: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    words = np.array(made_up_words(VOCABULARY))
    weights = 1.0 / np.arange(1, VOCABULARY + 1) ** 1.1
    weights /= weights.sum()
    chunk = 10_000
    with path.open("w", encoding="utf-8") as handle:
        for start in range(0, passages, chunk):
            rows = min(chunk, passages - start)
            drawn = words[rng.choice(VOCABULARY, size=(rows, 2 + WORDS_PER_PASSAGE), p=weights)]
            for offset, row in enumerate(drawn):
                contents = f'"{row[0].title()} {row[1].title()}"\n' + " ".join(row[2:])
                handle.write(json.dumps({"id": str(start + offset), "contents": contents}) + "\n")


def sample_queries(index: BM25Index, count: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    queries = []
    for passage in rng.integers(0, len(index), size=count):
        words = index.passage(int(passage)).text.split()
        start = int(rng.integers(0, max(1, len(words) - QUERY_WORDS)))
        queries.append(" ".join(words[start : start + QUERY_WORDS]))
    return queries


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1)


def timed(work) -> tuple[float, float]:
    """Wall and process CPU seconds of `work()`."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def exhaustive_top(index: BM25Index, query: str, k: int) -> list[tuple[int, float]]:
    """The top k of bm25s's own scoring of every passage: the reference the index's search must equal."""
    [tokens] = index._query_tokens([query])
    ids = index._bm25.get_tokens_ids(tokens)
    if not ids:
        return []
    scores = index._bm25.get_scores_from_ids(ids)
    floor = max(float(np.partition(scores, -k)[-k]), np.finfo(np.float32).tiny)
    candidates = np.flatnonzero(scores >= floor) if len(scores) >= k else np.flatnonzero(scores > 0)
    best = candidates[np.lexsort((candidates, -scores[candidates]))[:k]]
    return [(int(n), float(scores[n])) for n in best]


def measure_exactness(index: BM25Index, queries: list[str]) -> dict:
    found = [[(p.id, p.score) for p in hits] for hits in index.search(queries, 3)]
    reference = []
    wall, cpu = timed(lambda: reference.extend(exhaustive_top(index, query, 3) for query in queries))
    same = sum(a == [(index.passage(n).id, s) for n, s in b] for a, b in zip(found, reference, strict=True))
    return {
        "exhaustive_one_per_call_qps": rate(len(queries), wall),
        "exhaustive_cpu_ms_per_query": round(1000 * cpu / len(queries), 3),
        "same_top3_as_exhaustive": round(same / len(queries), 4),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure_queries(index: BM25Index, queries: list[str]) -> dict:
    load_before = load_average()
    single, single_cpu = timed(lambda: [index.search([query], 3) for query in queries])
    with ThreadPoolExecutor(2) as pool:
        two, two_cpu = timed(lambda: list(pool.map(lambda query: index.search([query], 3), queries)))
    load_after = load_average()
    start = time.perf_counter()
    for first in range(0, len(queries), BATCH):
        index.search(queries[first : first + BATCH], 3)
    batched = time.perf_counter() - start
    with RetrievalServer(index) as server:
        client = SearchClient(server.url)
        client.search(queries[:1], 3)
        start = time.perf_counter()
        for query in queries:
            client.search([query], 3)
        http_one = time.perf_counter() - start
        start = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda query: client.search([query], 3), queries))
        http_eight = time.perf_counter() - start
    return {
        "queries": len(queries),
        "in_process_one_per_call_qps": rate(len(queries), single),
        "in_process_ms_per_query": round(1000 * single / len(queries), 3),
        "in_process_cpu_ms_per_query": round(1000 * single_cpu / len(queries), 3),
        "in_process_2_threads_qps": rate(len(queries), two),
        "in_process_2_threads_cpu_ms_per_query": round(1000 * two_cpu / len(queries), 3),
        "in_process_queries_per_cpu_second_1_thread": rate(len(queries), single_cpu),
        "in_process_queries_per_cpu_second_2_threads": rate(len(queries), two_cpu),
        "load_average_1_5_15_min_before_after": [load_before, load_after],
        f"in_process_batches_of_{BATCH}_qps": rate(len(queries), batched),
        "http_one_client_qps": rate(len(queries), http_one),
        "http_8_client_threads_qps": rate(len(queries), http_eight),
    }


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def measure_corpus(corpus: Path, out: Path, queries: int) -> dict:
    start = time.perf_counter()
    assert build_index(corpus, out), "expected a fresh build"
    build_s = time.perf_counter() - start
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    assert not build_index(corpus, out), "expected the second build to reuse the index"
    rebuild_s = time.perf_counter() - start
    return {
        "corpus_mib": round(corpus.stat().st_size / 2**20, 1),
        "build_s": round(build_s, 2),
        "second_build_reuse_s": round(rebuild_s, 2),
        "peak_rss_mib_after_build": round(peak_rss_mib, 1),
        **measure_index(out, queries),
    }


def measure_index(out: Path, queries: int) -> dict:
    start = time.perf_counter()
    index = BM25Index(out)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    index.search(["a first search compiles or loads the compiled scorer"], 3)
    first_s = time.perf_counter() - start
    return {
        "passages": len(index),
        "load_mmap_s": round(load_s, 3),
        "first_search_s": round(first_s, 3),
        "index_mib": round(folder_bytes(out) / 2**20, 1),
        **measure_queries(index, sample_queries(index, queries)),
        **measure_exactness(index, sample_queries(index, queries)),
    }


def read_questions(path: Path, count: int) -> list[str]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [json.loads(line)["question"] for line in lines[:count]]


def measure_questions(index_dir: Path, questions: list[str]) -> dict:
    index = BM25Index(index_dir)
    return {
        "passages": len(index),
        **measure_queries(index, questions),
        **measure_exactness(index, questions),
    }


def measure_scale(index_dir: Path, repeats: list[int], queries: int) -> dict:
    """The scorer alone on the index's score matrix with every passage repeated r times."""
    index = BM25Index(index_dir)
    matrix = index._bm25.scores
    data, indices, indptr = (np.asarray(matrix[key]) for key in ("data", "indices", "indptr"))
    n_docs = int(matrix["num_docs"])
    token_ids = [index._bm25.get_tokens_ids(t) for t in index._query_tokens(sample_queries(index, queries))]
    token_ids = [ids for ids in token_ids if ids]
    lengths = np.diff(indptr)
    column = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    offset = np.arange(len(indices), dtype=np.int64) - indptr[column]
    out = {"passages": n_docs, "queries": len(token_ids)}
    for r in repeats:
        start = time.perf_counter()
        # column t of the tiled matrix: its postings + 0, + n_docs, ..., + (r - 1) n_docs, in order
        tiled_data = np.empty(r * len(data), dtype=data.dtype)
        tiled_indices = np.empty(r * len(indices), dtype=np.int32 if r * n_docs < 2**31 else np.int64)
        for copy in range(r):
            where = r * indptr[column] + copy * lengths[column] + offset
            tiled_data[where] = data
            tiled_indices[where] = indices + copy * n_docs
        del where
        tiled = PrunedScorer(tiled_data, tiled_indices, r * indptr, r * n_docs)
        tile_s = time.perf_counter() - start
        tiled.top(token_ids[0], 3)
        load_before = load_average()
        one, one_cpu = timed(lambda scorer=tiled: [scorer.top(ids, 3) for ids in token_ids])
        with ThreadPoolExecutor(2) as pool:
            two, two_cpu = timed(lambda scorer=tiled: list(pool.map(lambda ids: scorer.top(ids, 3), token_ids)))
        load_after = load_average()
        same = 0
        for query_ids in token_ids:
            docs, scores = tiled.top(query_ids, 3)
            full = tiled.exhaustive(query_ids)
            best = np.lexsort((np.arange(len(full)), -full))[:3]
            best = best[full[best] > 0]
            same += docs.tolist() == best.tolist() and scores.tobytes() == full[best].tobytes()
        out[f"repeated_{r}_times"] = {
            "passages": r * n_docs,
            "score_matrix_mib": round((tiled.data.nbytes + tiled.indices.nbytes + tiled.indptr.nbytes) / 2**20, 1),
            "tile_s": round(tile_s, 1),
            "scorer_cpu_ms_per_query_1_thread": round(1000 * one_cpu / len(token_ids), 3),
            "scorer_queries_per_cpu_second_1_thread": rate(len(token_ids), one_cpu),
            "scorer_queries_per_cpu_second_2_threads": rate(len(token_ids), two_cpu),
            "scorer_wall_qps_1_thread": rate(len(token_ids), one),
            "scorer_wall_qps_2_threads": rate(len(token_ids), two),
            "load_average_1_5_15_min_before_after": [load_before, load_after],
            "same_top3_as_exhaustive": round(same / len(token_ids), 4),
        }
        del tiled, tiled_data, tiled_indices
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sample", type=Path, help="a wiki-18 corpus JSONL to measure as it is")
    parser.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--questions", type=Path, help="a JSONL of questions to search the --sample with")
    parser.add_argument("--scale", type=Path, help="an index folder whose score matrix --repeat tiles")
    parser.add_argument("--repeat", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--workdir", type=Path, help="where corpora and indexes go (default: a temp dir)")
    parser.add_argument("--name", default="retrieval_throughput")
    parser.add_argument(
        "--built", type=Path, nargs="*", default=[], help="index folders built before, measured as they are"
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="retrieval-bench-", dir=args.workdir))
    report: dict = {"settings": {"topk": 3, "query_words": QUERY_WORDS, "vocabulary": VOCABULARY}, "corpora": {}}
    try:
        if args.sample is not None:
            report["corpora"]["sample"] = measure_corpus(args.sample, workdir / "sample-index", args.queries)
            if args.questions is not None:
                questions = read_questions(args.questions, args.queries)
                report["corpora"]["sample_questions"] = measure_questions(workdir / "sample-index", questions)
        for folder in args.built:
            manifest = json.loads((folder / "index.json").read_text())
            report["corpora"][f"built_{manifest['passages']}"] = {
                "build_s_in_manifest": manifest["build_seconds"],
                **measure_index(folder, args.queries),
            }
        if args.scale is not None:
            report["scale"] = measure_scale(args.scale, args.repeat, args.queries)
        for size in args.sizes:
            corpus = workdir / f"synthetic-{size}.jsonl"
            start = time.perf_counter()
            write_synthetic_corpus(corpus, size)
            generated_s = round(time.perf_counter() - start, 1)
            report["corpora"][f"synthetic_{size}"] = {
                "generate_s": generated_s,
                **measure_corpus(corpus, workdir / f"synthetic-{size}-index", args.queries),
            }
            corpus.unlink()
            shutil.rmtree(workdir / f"synthetic-{size}-index")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    save_result(args.name, report)


if __name__ == "__main__":
    main()
