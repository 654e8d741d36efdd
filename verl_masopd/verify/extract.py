"""Answer extraction from `#### ...`, `\\boxed{...}` and a program's printed output."""

from __future__ import annotations

_BOXED = "\\boxed"


def extract_hash_answer(text: str) -> str | None:
    """First line of the text after the LAST '####', stripped; None if absent or empty."""
    if "####" not in text:
        return None
    lines = text.rsplit("####", 1)[1].strip().splitlines()
    return lines[0].strip() if lines and lines[0].strip() else None


def _braced(text: str, open_index: int) -> str | None:
    """Content of the brace group opening at `open_index`, or None when it never closes."""
    depth = 0
    for index in range(open_index, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : index]
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} (nested braces kept); None if there is none."""
    end = len(text)
    while (start := text.rfind(_BOXED, 0, end)) != -1:
        brace = start + len(_BOXED)
        while brace < len(text) and text[brace] == " ":
            brace += 1
        if brace < len(text) and text[brace] == "{":
            content = _braced(text, brace)
            if content is not None:
                return content.strip()
        end = start
    return None


def extract_program_answer(stdout: str) -> str | None:
    """The answer a program printed: \\boxed{...} or `####` if present, else its last non-empty line."""
    for extractor in (extract_boxed, extract_hash_answer):
        answer = extractor(stdout)
        if answer is not None:
            return answer
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else None
