"""A BM25 index over a passage corpus (bm25s), on disk and memory-mapped.

An index folder holds `index.json` (the manifest: the corpus's SHA-256, the passage count, the
tokenizer and BM25 settings), `bm25/` (bm25s's score matrix and vocabulary) and the passages
(`store.py`). `build_index` is also the cache: a folder that already holds the index of the same
corpus bytes, built with the same settings, is kept as it is, so a second build is a load.
Lucene's BM25 with k1 = 0.9 and b = 0.4, the defaults of the Lucene searcher Search-R1's BM25
server uses; English stop words dropped, Snowball English stems. A search finds the exact top k
without scoring every passage (topk.py: MaxScore over bm25s's score matrix).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import bm25s
import Stemmer

from verl_masopd.retrieval.corpus import corpus_digest, read_corpus
from verl_masopd.retrieval.passages import Passage
from verl_masopd.retrieval.store import OFFSETS_FILE, PASSAGES_FILE, PassageStore, write_passages
from verl_masopd.retrieval.topk import PrunedScorer

MANIFEST = "index.json"
BM25_DIR = "bm25"
BM25_FILES = (
    "data.csc.index.npy",
    "indices.csc.index.npy",
    "indptr.csc.index.npy",
    "vocab.index.json",
    "params.index.json",
)
FORMAT = 1
SETTINGS = {
    "tokenizer": {"lower": True, "stopwords": "en", "stemmer": "english"},
    "bm25": {"method": "lucene", "k1": 0.9, "b": 0.4},
}


class NotAnIndex(ValueError):
    """A folder that is not a retrieval index; the message names it."""


def _read_manifest(directory: Path) -> dict | None:
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _is_current(directory: Path, digest: str) -> bool:
    manifest = _read_manifest(directory)
    return (
        manifest is not None
        and manifest.get("format") == FORMAT
        and manifest.get("corpus_sha256") == digest
        and all(manifest.get(key) == value for key, value in SETTINGS.items())
    )


def _tokenize(texts):
    settings = SETTINGS["tokenizer"]
    return bm25s.tokenize(
        texts,
        lower=settings["lower"],
        stopwords=settings["stopwords"],
        stemmer=Stemmer.Stemmer(settings["stemmer"]),
        return_ids=True,
        show_progress=False,
    )


def build_index(corpus: str | Path, out: str | Path) -> bool:
    """Index the corpus JSONL into the folder `out`; True when it built the index, False when
    `out` already held the index of these corpus bytes. Raises CorpusError for a bad corpus
    (nothing is left behind) and NotAnIndex when `out` exists and holds something else."""
    corpus, out = Path(corpus), Path(out)
    digest = corpus_digest(corpus)
    if _is_current(out, digest):
        return False
    if out.exists() and not (out.is_dir() and (_read_manifest(out) is not None or not any(out.iterdir()))):
        raise NotAnIndex(f"{out}: exists and is not a retrieval index; not overwritten")
    started = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.building-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        tokens = _tokenize(write_passages(partial, read_corpus(corpus)))
        bm25 = bm25s.BM25(**SETTINGS["bm25"])
        bm25.index(tokens, show_progress=False)
        bm25.save(partial / BM25_DIR, show_progress=False)
        manifest = {
            "format": FORMAT,
            "corpus": str(corpus.resolve()),
            "corpus_sha256": digest,
            "passages": len(tokens.ids),
            **SETTINGS,
            "bm25s_version": bm25s.__version__,
            "build_seconds": round(time.perf_counter() - started, 3),
        }
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return True


class BM25Index:
    """A loaded index: `search` serves the Retriever interface; safe to call from many threads."""

    def __init__(self, directory: str | Path):
        """Load the index in `directory` memory-mapped; raises NotAnIndex naming the folder when
        it is not an index."""
        self.directory = Path(directory)
        manifest = _read_manifest(self.directory)
        if manifest is None:
            raise NotAnIndex(f"{self.directory}: not a retrieval index (no readable {MANIFEST})")
        if manifest.get("format") != FORMAT:
            raise NotAnIndex(f"{self.directory}: index format {manifest.get('format')!r}, this version reads {FORMAT}")
        needed = [PASSAGES_FILE, OFFSETS_FILE] + [f"{BM25_DIR}/{name}" for name in BM25_FILES]
        missing = [name for name in needed if not (self.directory / name).is_file()]
        if missing:
            raise NotAnIndex(f"{self.directory}: not a complete retrieval index (missing {', '.join(missing)})")
        self.manifest = manifest
        self._bm25 = bm25s.BM25.load(self.directory / BM25_DIR, mmap=True, load_corpus=False, show_progress=False)
        matrix = self._bm25.scores
        self._scorer = PrunedScorer(matrix["data"], matrix["indices"], matrix["indptr"], matrix["num_docs"])
        self._passages = PassageStore(self.directory)
        self._stemmers = threading.local()

    def __len__(self) -> int:
        return len(self._passages)

    def passage(self, number: int) -> Passage:
        """The passage at position `number` of the corpus (0-based, blank lines not counted)."""
        return self._passages.get(number)

    def _query_tokens(self, queries: list[str]) -> list[list[str]]:
        # Snowball stemmers keep state: one per thread.
        if not hasattr(self._stemmers, "stemmer"):
            self._stemmers.stemmer = Stemmer.Stemmer(self.manifest["tokenizer"]["stemmer"])
        settings = self.manifest["tokenizer"]
        return bm25s.tokenize(
            queries,
            lower=settings["lower"],
            stopwords=settings["stopwords"],
            stemmer=self._stemmers.stemmer,
            return_ids=False,
            show_progress=False,
        )

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """The `topk` best-scoring passages of each query, best first (equal scores: corpus order);
        passages that share no term with the query are left out (a query of stop words only
        finds nothing)."""
        if topk < 1:
            raise ValueError(f"topk must be at least 1, got {topk}")
        found = []
        for tokens in self._query_tokens(list(queries)):
            ids = self._bm25.get_tokens_ids(tokens)
            if not ids:
                found.append([])
                continue
            docs, scores = self._scorer.top(ids, topk)
            found.append([self._passages.get(int(n), float(x)) for n, x in zip(docs, scores, strict=True)])
        return found
