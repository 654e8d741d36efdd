"""How learnable the tiny world's search questions are with the real BM25 index: recall@k of the
passages a question needs, for the queries a searcher could send.

The corpus (verl_masopd/tiny_world/search_kb.py) is indexed with verl_masopd.retrieval.build_index
and searched through BM25Index; recall@k is the share of questions whose passage is among the k
best passages of the query. Measured over every distinct question of the world (each question
type with each of its subjects once) and over the questions of the training and held-out index
ranges as the data files hold them (`task(i)`):
  one-hop  the gold passage by the question text (@1, @3), and by the question followed by the
           subject's kind ("... born? person"), a reformulation that names what the namesakes are not
  two-hop  the first-hop passage by the question (@3), the second-hop passage by the second
           sub-question, formed from the first answer ("Which country is enlo in?", @3), both,
           and the second-hop passage by the question alone (@3): low when two searches are needed
Also: the world's size, passage lengths in words and in tiny-tokenizer tokens (title line
included), question lengths in tokens (the chat template not included).

Usage: python benchmarks/search_world_retrieval.py [--train-sample 2000] [--heldout-sample 1000] [--name NAME]
Writes benchmarks/results/NAME.json (default search_world_retrieval) and prints it.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from results_file import save_result

from verl_masopd.retrieval import BM25Index, build_index
from verl_masopd.tiny_world.math_tasks import HELDOUT_START
from verl_masopd.tiny_world.models import build_tokenizer
from verl_masopd.tiny_world.search_kb import knowledge_base, write_corpus
from verl_masopd.tiny_world.search_tasks import CHAINS, FACTS, make_task, partition, subjects, task

TOPK = 3


def share(values: list[bool]) -> float:
    return round(sum(values) / len(values), 3)


def spread(values: list[int]) -> dict:
    return {"min": min(values), "mean": round(sum(values) / len(values), 1), "max": max(values)}


class Recall:
    """Recall@k of questions against the index, the ranked ids of each query cached."""

    def __init__(self, index: BM25Index):
        self.index = index
        self._ranked: dict[str, list[str]] = {}

    def found(self, query: str, passage_id: str, k: int = TOPK) -> bool:
        if query not in self._ranked:
            self._ranked[query] = [p.id for p in self.index.search([query], TOPK)[0]]
        return passage_id in self._ranked[query][:k]

    def one_hop(self, tasks) -> dict:
        by_type = defaultdict(list)
        at1, at3, with_kind = [], [], []
        for t in tasks:
            gold = t.passages[0]
            kind = knowledge_base().entity(t.subject).kind
            at1.append(self.found(t.question, gold, 1))
            at3.append(self.found(t.question, gold))
            with_kind.append(self.found(f"{t.question} {kind}", gold))
            by_type[t.type].append(at3[-1])
        return {
            "questions": len(at3),
            "question_recall_at_1": share(at1),
            "question_recall_at_3": share(at3),
            "question_and_kind_recall_at_3": share(with_kind),
            "by_type_questions_and_question_recall_at_3": {
                name: [len(v), share(v)] for name, v in sorted(by_type.items())
            },
        }

    def two_hop(self, tasks) -> dict:
        by_type = defaultdict(lambda: ([], [], []))
        first, second, both, second_by_question = [], [], [], []
        for t in tasks:
            first.append(self.found(t.question, t.passages[0]))
            second.append(self.found(t.sub_questions[1], t.passages[1]))
            both.append(first[-1] and second[-1])
            second_by_question.append(self.found(t.question, t.passages[1]))
            for found, outcome in zip(by_type[t.type], (first, second, second_by_question)):
                found.append(outcome[-1])
        return {
            "questions": len(first),
            "first_hop_by_question_recall_at_3": share(first),
            "second_hop_by_second_sub_question_recall_at_3": share(second),
            "both_hops_recall_at_3": share(both),
            "second_hop_by_question_recall_at_3": share(second_by_question),
            "by_type_questions_first_hop_second_hop_second_hop_by_question_recall_at_3": {
                name: [len(a), share(a), share(b), share(c)] for name, (a, b, c) in sorted(by_type.items())
            },
        }


def measure(recall: Recall, tasks) -> dict:
    return {
        "one_hop": recall.one_hop([t for t in tasks if t.hops == 1]),
        "two_hop": recall.two_hop([t for t in tasks if t.hops == 2]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-sample", type=int, default=2000, help="training questions [0, N)")
    parser.add_argument("--heldout-sample", type=int, default=1000, help="held-out questions from HELDOUT_START")
    parser.add_argument("--name", default="search_world_retrieval")
    args = parser.parse_args()
    kb = knowledge_base()
    tokenizer = build_tokenizer()
    distinct = [make_task(0, t, s) for t in (*FACTS, *CHAINS) for s in subjects(t)]
    workdir = Path(tempfile.mkdtemp(prefix="search-world-"))
    try:
        write_corpus(workdir / "corpus.jsonl")
        start = time.perf_counter()
        build_index(workdir / "corpus.jsonl", workdir / "index")
        build_s = round(time.perf_counter() - start, 2)
        recall = Recall(BM25Index(workdir / "index"))
        own = {kb.passage_id(e.name) for e in kb.entities}
        report = {
            "settings": {"topk": TOPK, "index": "verl_masopd.retrieval.BM25Index (bm25s, Lucene BM25 k1 0.9 b 0.4)"},
            "world": {
                "entities": dict(Counter(e.kind for e in kb.entities)),
                "passages": len(kb.passages),
                "namesake_passages": len(kb.passages) - len(own),
                "index_build_s": build_s,
                "passage_words": spread([len(p.text.split()) for p in kb.passages]),
                "passage_tokens": spread([len(tokenizer(p.contents)["input_ids"]) for p in kb.passages]),
                "own_passage_words": spread([len(p.text.split()) for p in kb.passages if p.id in own]),
                "distinct_questions": dict(Counter(partition(t.type, t.subject) for t in distinct)),
                "question_tokens_by_hops": {
                    hops: spread([len(tokenizer(t.question)["input_ids"]) for t in distinct if t.hops == hops])
                    for hops in (1, 2)
                },
            },
            "distinct_questions": measure(recall, distinct),
            f"train_questions_0_{args.train_sample}": measure(recall, [task(i) for i in range(args.train_sample)]),
            f"heldout_questions_{args.heldout_sample}": measure(
                recall, [task(i) for i in range(HELDOUT_START, HELDOUT_START + args.heldout_sample)]
            ),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    save_result(args.name, report)


if __name__ == "__main__":
    main()
