"""The token code of students and teacher.

chat.py     the one chat encoding (Qwen3-style, no thinking); untrusted text stays text
context.py  the token ids of a turn's context: the layout and the one truncation rule
layout.py   the prompt/response padding layout of every batch
"""
