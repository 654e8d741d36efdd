"""Shared-prefix teacher scoring against the context length: opd's pass vs masopd's (κ = 1) tree rows.

Synthetic requests on the tiny world's math teacher (sdpa_packed, 2 threads): per response a
shared context s of --shared tokens, role conditions c_r (30 tokens) and c_q (37) and a response y
of --response tokens; opd scores s ⊕ c_r ⊕ y, masopd the tree row s ⊕ (c_r ⊕ y) ⊕ (c_q ⊕ y), both
through `teacher.prefix_scoring` (16 responses per call, one packed row). Median seconds of
--repeats after a warm-up, the two taking turns; the time and token ratios against the bound
(|s| + |c_r| + |c_q| + 2|y|) / (|s| + |c_r| + |y|). Writes benchmarks/results/shared_prefix_cost.json.

    python benchmarks/shared_prefix_cost.py [--shared 120,1000] [--response 16,48] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from results_file import save_result
from transformers import AutoModelForCausalLM

from verl_masopd.platform.packed_attention import PACKED_SDPA
from verl_masopd.teacher.prefix_scoring import score_with_shared_prefix
from verl_masopd.teacher.scoring import ScoreRequest
from verl_masopd.tiny_world import world

OWN, CONTRAST = 30, 37
RESPONSES = 16


def requests(vocab: int, shared: int, response: int, seed: int) -> tuple[list[ScoreRequest], list[ScoreRequest]]:
    """(opd's requests, masopd's own + contrast requests) of RESPONSES random responses."""
    g = torch.Generator().manual_seed(seed)

    def tokens(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    opd, masopd = [], []
    for _ in range(RESPONSES):
        s, c_r, c_q, y = tokens(shared), tokens(OWN), tokens(CONTRAST), tokens(response)
        opd.append(ScoreRequest(s + c_r, y))
        masopd += [ScoreRequest(s + c_r, y), ScoreRequest(s + c_q, y)]
    return opd, masopd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default="120,1000", help="shared context lengths |s|")
    parser.add_argument("--response", default="16,48", help="response lengths |y|")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(world.models("math")["teacher"], attn_implementation=PACKED_SDPA)
    model.eval()
    cases = {}
    for shared in map(int, args.shared.split(",")):
        for response in map(int, args.response.split(",")):
            batches = dict(zip(("opd", "masopd"), requests(model.config.vocab_size, shared, response, 0), strict=True))
            seconds, computed = {name: [] for name in batches}, {}
            for _ in range(args.repeats + 1):
                for name, batch in batches.items():
                    start = time.perf_counter()
                    _, computed[name] = score_with_shared_prefix(model, batch)
                    seconds[name].append(time.perf_counter() - start)
            median = {name: statistics.median(times[1:]) for name, times in seconds.items()}
            cases[f"shared{shared}_response{response}"] = {
                "seconds": median,
                "computed_tokens": computed,
                "time_ratio": median["masopd"] / median["opd"],
                "token_ratio": computed["masopd"] / computed["opd"],
                "bound": (shared + OWN + CONTRAST + 2 * response) / (shared + OWN + response),
            }
    save_result(
        "shared_prefix_cost",
        {
            "teacher": "tiny world math teacher, sdpa_packed, float32, 2 threads",
            "responses_per_call": RESPONSES,
            "role_conditions": {"own": OWN, "contrast": CONTRAST},
            "repeats": args.repeats,
            "cases": cases,
        },
    )


if __name__ == "__main__":
    main()
