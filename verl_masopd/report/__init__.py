"""The paper's report from evaluation outputs and training logs: tables (Markdown, JSON) and figures (PNG).

Input layout (one folder RUNS; `layout.py`):

    RUNS/<method>/seed<k>/eval/<benchmark>/        python -m verl_masopd.eval --out of one benchmark
    RUNS/<method>/seed<k>/eval-swap/<benchmark>/   the same with --swap-roles (for the swap drop)
    RUNS/<method>/seed<k>/train/<domain>/          the training run; TensorBoard event files anywhere below

Run `python -m verl_masopd.report --runs RUNS --out DIR`.
"""
