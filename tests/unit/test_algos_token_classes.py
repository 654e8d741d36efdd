"""Token classes of responses (verl_masopd/algos/token_classes.py): the characters of hand-made
replies, and the tokens of the tiny tokenizer's compact replies, classified by hand."""

import pytest
import torch

from verl_masopd.algos.token_classes import (
    CONTENT,
    DECISION,
    FORMAT,
    PADDING,
    PROGRAM,
    TOKEN_CLASSES,
    TokenClassifier,
    char_classes,
)
from verl_masopd.tiny_world.models import build_tokenizer

LETTER = {"d": DECISION, "f": FORMAT, "p": PROGRAM, "c": CONTENT}


def labelled(spec: str) -> list[int]:
    return [LETTER[ch] for ch in spec]


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        # decision word with its newline, the #### marker with its blank, the answer
        ("hold\n#### 12", "ddddd" + "fffff" + "cc"),
        # a program block: fence lines with their newlines, the body as program
        ("revise\n```python\nx\n```", "ddddddd" + "ffffffffff" + "pp" + "fff"),
        # a test case: input and output bodies are content; the reply starts with a fence
        ("```input\n3\n```\n```output\n7\n```", "fffffffff" + "cc" + "ffff" + "ffffffffff" + "cc" + "fff"),
        # prose before the answer is content; a `hold` that does not lead the reply is content
        ("I hold 5\n#### 5", "cccccccc" + "c" + "fffff" + "c"),
        # leading blanks and any case belong to the decision; the word must stand alone
        ("  Hold \n7", "dddddddd" + "c"),
        ("holding\n7", "ccccccc" + "c" + "c"),
        # #### inside a program is program; an unclosed block runs to the end
        ("```py\n#### 1\n", "ffffff" + "ppppppp"),
        ("", ""),
    ],
)
def test_char_classes(text, spec):
    assert char_classes(text).tolist() == labelled(spec)


@pytest.fixture(scope="module")
def classifier():
    return TokenClassifier(build_tokenizer())


def pieces_and_classes(classifier, text):
    tokenizer = classifier.tokenizer
    ids = tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    pieces = ["<eos>" if i in classifier.special else tokenizer.decode([i]) for i in ids]
    return list(zip(pieces, [TOKEN_CLASSES[c] for c in classifier.classify(ids)], strict=True))


def test_compact_tool_user_reply(classifier):
    assert pieces_and_classes(classifier, "revise\n```python\nprint(3 + 4)\n```") == [
        ("re", "decision"),
        ("vis", "decision"),
        ("e", "decision"),
        ("\n", "decision"),
        ("```", "format"),
        ("python", "format"),
        ("\n", "format"),
        ("print", "program"),
        ("(", "program"),
        ("3", "program"),
        (" +", "program"),
        (" ", "program"),
        ("4", "program"),
        (")", "program"),
        ("\n", "program"),
        ("```", "format"),
        ("<eos>", "format"),  # special tokens are format
    ]


def test_compact_reasoner_reply(classifier):
    assert pieces_and_classes(classifier, "hold\n#### 12") == [
        ("hold", "decision"),
        ("\n", "decision"),
        ("####", "format"),
        (" ", "format"),
        ("1", "content"),
        ("2", "content"),
        ("<eos>", "format"),
    ]


def test_a_token_takes_the_class_of_its_first_non_blank_character():
    class Pieces:  # a tokenizer whose tokens are whole strings, some straddling two classes
        all_special_ids = [0]
        table = {1: "hold", 2: "\n####", 3: " 4", 4: "\n\n", 5: ""}

        def decode(self, ids):
            return self.table[ids[0]]

    classifier = TokenClassifier(Pieces())
    # "\n####" starts with the decision's newline but its first non-blank is the marker; " 4" is
    # content; "\n\n" is blank: its first character ends the answer line (content); the empty
    # piece takes the next character's class, here none is left (content); 0 is special
    assert classifier.classify([1, 2, 3, 4, 5, 0]).tolist() == [DECISION, FORMAT, CONTENT, CONTENT, CONTENT, FORMAT]
    assert classifier.classify([]).tolist() == []


def test_batch_classifies_each_row_up_to_its_length(classifier):
    tokenizer = classifier.tokenizer
    short = tokenizer("hold\n#### 1")["input_ids"]  # hold, \n, ####, " ", 1
    long = tokenizer("#### 123456")["input_ids"]  # ####, " ", 1, …, 6
    responses = torch.zeros(2, 8, dtype=torch.long)
    responses[0, :5], responses[1] = torch.tensor(short), torch.tensor(long)
    out = classifier.batch(responses, torch.tensor([5, 8]))
    assert out.dtype == torch.int8
    assert out.tolist() == [
        [DECISION, DECISION, FORMAT, FORMAT, CONTENT, PADDING, PADDING, PADDING],
        [FORMAT, FORMAT] + [CONTENT] * 6,
    ]
