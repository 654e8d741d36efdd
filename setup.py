"""verl-masopd: multi-agent on-policy distillation (MAS-OPD) and its baselines on verl."""

from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    "verl==0.9.1",
    # The CPU build 2.13.0 is installed first (constraints.txt); the gpu extra pins verl's tested torch.
    "torch>=2.11,<2.14",
    "transformers>=5.5.3,<5.11,!=5.6.0",
    "tokenizers>=0.21",
    "ray[default]>=2.41",
    "tensordict>=0.8.0,<=0.10.0,!=0.9.0",
    "hydra-core>=1.3",
    "omegaconf>=2.3",
    # The values of python -m verl_masopd.eval --workflow-option KEY=VALUE (omegaconf needs it too).
    "pyyaml>=5.1",
    "math-verify>=0.8",
    "pandas>=2.0",
    "pyarrow>=19.0.0",
    "numpy>=2.0.0",
    "tqdm",
    # In the sandbox's prelude: LeetCode-style programs use SortedList without an import.
    "sortedcontainers>=2.4",
    # The report's figures (python -m verl_masopd.report); its TensorBoard reader comes with verl.
    "matplotlib>=3.8",
    # The report's seed-paired differences: the Student t quantile of their intervals.
    "scipy>=1.11",
    # Retrieval for search agents (verl_masopd/retrieval): BM25 over sparse matrices, English stems;
    # its server also uses uvicorn and fastapi below.
    "bm25s>=0.3.16,<0.4",
    "PyStemmer>=3.1,<4",
    # The pruned BM25 top k (verl_masopd/retrieval/topk.py), compiled, off the GIL.
    "numba>=0.59",
    # Modules verl 0.9.1 imports without declaring them in its base requirements.
    "pillow",
    "cachetools",
    "uvicorn",
    "fastapi",
    "aiohttp",
    "pyzmq",
    "msgspec",
    # One fetch at a time per cache of fetched models (verl_masopd/models/fetch.py).
    "filelock>=3.12",
]

EXTRAS_REQUIRE = {
    # The real-model tests fetch and convert a GGUF (python -m verl_masopd.models), which needs `gguf`.
    # pytest 9.2 derives a test's id from its structure, so pytest-xdist 3.8's `--dist loadgroup`, which
    # renames ids to group them, has no effect there: the heavy tests would run side by side.
    "test": [
        "pytest>=8,<9.2",
        "pytest-asyncio>=0.23",
        "pytest-timeout",
        "pytest-xdist>=3.5",
        "ruff>=0.6",
        "gguf>=0.10",
    ],
    # python -m verl_masopd.models fetch: transformers reads GGUF files through the `gguf` package.
    "real": ["gguf>=0.10"],
    # verl 0.9.1's tested GPU stack by its own extras, so that its pins (torch, vLLM, transformers,
    # flash-attn, ...) are never restated here; never installed in CI. Install it with
    # scripts/setup_gpu.sh: fsdp pins flash-attn, a source distribution whose build imports torch and
    # so fails in pip's isolated build; the script installs torch, then flash-attn, then this.
    "gpu": ["verl[vllm,fsdp]==0.9.1"],
}

setup(
    name="verl-masopd",
    version="0.1.0",
    description="MAS-OPD (on-policy distillation for multi-agent systems) and its baselines on verl",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["verl_masopd", "verl_masopd.*", "data_prep", "data_prep.*"]),
    package_data={
        "verl_masopd": ["config/*.yaml", "config/**/*.yaml", "tiny_world/weights/**/*"],
        "data_prep": ["*.md"],
    },
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={
        "verl.plugins": ["verl_masopd = verl_masopd.plugin"],
        "console_scripts": [
            "masopd-train = verl_masopd.train:main",
            "masopd-eval = verl_masopd.eval.__main__:main",
        ],
    },
)
