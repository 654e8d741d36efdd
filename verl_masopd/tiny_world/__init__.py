"""The embedded default: a tiny world in which a competent tiny teacher exists and MAS-OPD's
learning shows within minutes on 2 CPU cores.

  math_tasks.py  the Reasoner–Tool-User task family (an arithmetic ladder L1..L4)
  demos.py       demonstrations of every role at every turn, rendered by the workflow itself
  pretrain.py    deterministic pretraining of the teacher, and of the student continued from it
  builder.py     each domain's recipe (seed, schedule) and the builder fingerprint
  weights.py     the shipped weights, their manifest and its check
  world.py       the files a run uses: verified models and the train / held-out parquet files
  search_kb.py   the search workflow's knowledge base: entities, passages and namesakes from a seed
  search_tasks.py  its one-hop and two-hop questions, their qa rows, and the data files with the index
"""
