"""verl's own RLHFDataset reads the parquet files data_prep writes."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from data_prep.builtin import builtin_rows
from data_prep.writer import write_rows

pytestmark = pytest.mark.integration

CHAT_TEMPLATE = "{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}"


def _tiny_tokenizer() -> PreTrainedTokenizerFast:
    words = ["<unk>", "<pad>", "<s>", "</s>", "user", "assistant", "Compute", "Read", "Print"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", eos_token="</s>", chat_template=CHAT_TEMPLATE
    )


def test_rlhf_dataset_reads_code_and_math_files(tmp_path):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    files = []
    for domain in ("code", "math"):
        files.append(str(tmp_path / f"{domain}.parquet"))
        write_rows(builtin_rows(domain, 3), files[-1])
    config = OmegaConf.create(
        {"cache_dir": str(tmp_path / "cache"), "max_prompt_length": 512, "filter_overlong_prompts_workers": 1}
    )
    dataset = RLHFDataset(files, _tiny_tokenizer(), config)
    assert len(dataset) == 6
    code, math = dataset[0], dataset[3]
    assert code["ability"] == "code" and code["index"] == 0
    assert code["raw_prompt"] == [{"role": "user", "content": builtin_rows("code", 1)[0]["extra_info"]["problem"]}]
    assert code["extra_info"]["fn_name"] == "" and code["extra_info"]["reference_solution"].startswith("a, b =")
    assert math["data_source"] == "builtin_math" and math["reward_model"]["ground_truth"] == "40"
