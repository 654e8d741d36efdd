"""What a conversion did: rows read, kept and dropped, with the reason for each drop."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

EXAMPLES_PER_REASON = 3


@dataclass
class Summary:
    dataset: str
    read: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def drop(self, reason: str, where: str) -> None:
        self.dropped[reason] += 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < EXAMPLES_PER_REASON:
            shown.append(where)

    def format(self) -> str:
        lines = [f"{self.dataset}: read {self.read}, kept {self.kept}, dropped {sum(self.dropped.values())}"]
        for reason, count in sorted(self.dropped.items(), key=lambda item: (-item[1], item[0])):
            lines.append(f"  dropped {count}: {reason} (e.g. {'; '.join(self.examples[reason])})")
        return "\n".join(lines)
