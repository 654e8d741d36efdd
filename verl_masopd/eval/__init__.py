"""Evaluation of frozen policies on benchmark parquet files."""
