"""The multi-hop QA benchmarks: HotpotQA, 2WikiMultihopQA, MuSiQue, each also in FlashRAG's layout.

- HotpotQA (`hotpot_{train_v1.1,dev_distractor_v1,dev_fullwiki_v1}.json`, one JSON array):
  `{_id, question, answer, type, level, supporting_facts, context}`; the HF `hotpot_qa` rows
  name the id `id` and hold `supporting_facts`/`context` as column dicts
  (`{"title": [...], "sentences": [[...]]}`) instead of `[title, sentences]` pairs.
- 2WikiMultihopQA (`{train,dev}.json`): `{_id, type, question, context, supporting_facts,
  evidences, answer, ...}`, the same pair lists as HotpotQA.
- MuSiQue (`musique_{ans,full}_v1.0_{train,dev}.jsonl`, or a JSON array of the same records):
  `{id, paragraphs, question, question_decomposition, answer, answer_aliases, answerable}`; the
  golden answers are the answer and its aliases. Unanswerable questions (MuSiQue-Full) are dropped.

Each question ships with paragraphs (`context`, MuSiQue's `paragraphs`; in FlashRAG's rows under
`metadata`): `paragraphs` reads them as (title, text) for `python -m data_prep corpus`. They are
not copied into the rows; the supporting facts and the question type are (metadata).
"""

from __future__ import annotations

from data_prep.errors import Dropped
from data_prep.qa import Question, qa_source


def hotpotqa_question(fields: dict) -> Question | None:
    if not _has_layout(fields, "_id"):
        return None
    return Question(
        question=fields["question"],
        answers=[fields["answer"]],
        uid=fields.get("_id", fields.get("id")),
        metadata={
            "type": fields.get("type"),
            "level": fields.get("level"),
            "supporting_facts": _supporting_facts(fields.get("supporting_facts")),
        },
    )


def wiki2_question(fields: dict) -> Question | None:
    if not _has_layout(fields, "_id"):
        return None
    return Question(
        question=fields["question"],
        answers=[fields["answer"]],
        uid=fields.get("_id", fields.get("id")),
        metadata={
            "type": fields.get("type"),
            "supporting_facts": _supporting_facts(fields.get("supporting_facts")),
            "evidences": fields.get("evidences") or [],
        },
    )


def musique_question(fields: dict) -> Question | None:
    if not _has_layout(fields, "id"):
        return None
    if fields.get("answerable") is False:
        raise Dropped("unanswerable question (MuSiQue-Full)")
    steps = fields.get("question_decomposition") or []
    return Question(
        question=fields["question"],
        answers=[fields["answer"], *(fields.get("answer_aliases") or [])],
        uid=fields["id"],
        metadata={
            "decomposition": [
                {k: step.get(k) for k in ("question", "answer", "paragraph_support_idx")}
                for step in steps
                if isinstance(step, dict)
            ]
        },
    )


def paragraphs(fields: dict) -> list[tuple[str, str]] | None:
    """The (title, text) paragraphs a question ships with, in its order; None when it has none.

    HotpotQA's sentences after the first start with a space, 2Wiki's do not: they are joined
    with one space where neither side has one.
    """
    metadata = fields.get("metadata")
    for source in (fields, metadata if isinstance(metadata, dict) else {}):
        if isinstance(source.get("paragraphs"), list):
            return [
                (str(p.get("title", "")), p["paragraph_text"])
                for p in source["paragraphs"]
                if isinstance(p, dict) and isinstance(p.get("paragraph_text"), str)
            ]
        context = source.get("context")
        if isinstance(context, dict):
            context = list(zip(context.get("title") or [], context.get("sentences") or []))
        if isinstance(context, list):
            return [
                (str(pair[0]), _joined(pair[1]))
                for pair in context
                if isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[1], list | tuple)
            ]
    return None


def _has_layout(fields: dict, id_field: str) -> bool:
    """Whether the record has a question, an answer and an id (`id_field`, or HF's `id`)."""
    return "question" in fields and "answer" in fields and (id_field in fields or "id" in fields)


def _joined(sentences) -> str:
    text = ""
    for sentence in map(str, sentences):
        if text and not text[-1].isspace() and sentence and not sentence[0].isspace():
            text += " "
        text += sentence
    return text.strip()


def _supporting_facts(facts) -> list:
    """`[[title, sentence index], ...]` from the pair list or HF's `{"title", "sent_id"}` columns."""
    if isinstance(facts, dict):
        return [list(pair) for pair in zip(facts.get("title") or [], facts.get("sent_id") or [])]
    return [list(pair) for pair in facts or [] if isinstance(pair, list | tuple)]


HOTPOTQA = qa_source("hotpotqa", "dev", hotpotqa_question, "HotpotQA's {_id, question, answer}")
WIKI2 = qa_source("2wikimultihopqa", "dev", wiki2_question, "2WikiMultihopQA's {_id, question, answer}")
MUSIQUE = qa_source("musique", "dev", musique_question, "MuSiQue's {id, question, answer}")
