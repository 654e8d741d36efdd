"""The paper's report from evaluation outputs and training logs: tables (Markdown, JSON) and figures (PNG).

Input layout (one folder RUNS; `layout.py`):

    RUNS/<method>/seed<k>/eval/<benchmark>/        python -m verl_masopd.eval --out of one benchmark
    RUNS/<method>/seed<k>/eval-swap/<benchmark>/   the same with --swap-roles (for the swap drop)
    RUNS/<method>/seed<k>/train/<domain>/          the training run; TensorBoard event files anywhere below

Run `python -m verl_masopd.report --runs RUNS --out DIR`.

The QA statistics of search systems (question answering, k attempts per question) are a library
of their own, torch-free: the per-attempt record and its JSON lines, which an evaluation of the
search workflow writes to `qa_attempts.jsonl` (`verl_masopd/eval/qa_attempts.py`),
`qa_scores.py` (avg@k, pass@k, k/k, sub-EM, relaxed EM, failures, tokens; macro averages),
`qa_bootstrap.py` (paired bootstrap intervals of A − B), `qa_tables.py` (`qa_tables({system:
attempts})`, datasets as columns plus Macro) and `qa_markdown.py` (those tables as Markdown).
`qa_systems.py` reads a RUNS folder's attempts as those systems, one per method (and seed).
"""
