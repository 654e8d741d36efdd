"""Dataset converters: original public release files -> the project's verl-ready parquet schema."""
