"""The tiny search world's demonstrations and models: every demonstrated episode is one the real
search workflow plays and judges correct on real BM25 retrieval, its replies parse as their
role's, its observations are what the search tool returns (clipped as the rollout clips them) and
carry no pretraining loss, the student's Searcher answers a share of its subtasks without
searching, and the recipe's exports name the search world's files."""

import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_masopd.config import compose_config
from verl_masopd.retrieval.index import MANIFEST as INDEX_MANIFEST
from verl_masopd.tiny_world.builder import recipe
from verl_masopd.tiny_world.pretrain import IGNORE, collate
from verl_masopd.tiny_world.search_demos import HORIZONS, JUDGE, OPTIONS, SearchDemonstrations, hops, search_index
from verl_masopd.tiny_world.search_tasks import task
from verl_masopd.tiny_world.weights import WEIGHTS
from verl_masopd.workflows.search import ANSWERER, CASCADED, HIERARCHICAL, LEADER, SEARCHER, without_spans

ROLES = {"Leader.": LEADER, "Searcher.": SEARCHER, "Answerer.": ANSWERER, "Judge.": JUDGE}


@pytest.fixture(scope="module")
def index():
    return search_index()


@pytest.fixture(scope="module")
def demos(tiny_tokenizer, index):
    return {
        system: SearchDemonstrations(tiny_tokenizer, system, retriever=index) for system in (HIERARCHICAL, CASCADED)
    }


def _role(messages: list[dict]) -> str:
    return next(role for prefix, role in ROLES.items() if messages[0]["content"].startswith(prefix))


@pytest.mark.parametrize("system", [HIERARCHICAL, CASCADED])
def test_demonstrated_episodes_are_played_and_judged_correct_by_the_real_workflow(demos, system):
    d = demos[system]
    played_questions = 0
    for i in range(40):
        t = task(i)
        result = d.episode(t)
        if result is None:
            assert system == CASCADED and t.hops == 2  # only a cascaded two-hop search can run out of calls
            continue
        episode, turns = result
        played_questions += 1
        assert episode.done and d.workflow.judge(episode).correct
        acted = [(turn.index, name) for turn in episode.turns for name in turn.actions]
        assert [agent.name for agent, _, _ in turns] == [name for _, name in acted]
        for (index, _), (agent, messages, segments) in zip(acted, turns, strict=True):
            assert messages == d.workflow.render(episode, agent, index)
            reply = "".join(text for text, _ in segments)
            action = d.workflow.parse(agent, reply)
            assert action.error is None, (agent.name, reply)
            if agent.role == LEADER and "subtasks" in action.fields:
                assert action.fields["subtasks"].strip('[]"') in {h.question for h in hops(t)} | {t.question}
            if agent.role == SEARCHER:
                observed = [text for text, trained in segments if not trained]
                assert 1 <= len(observed) <= OPTIONS["max_calls"]
                replayed = ""
                for text, trained in segments:
                    if not trained:
                        assert text == d._observe(replayed)  # what the tool returns for the reply so far
                    replayed += text
                assert "<information>" not in without_spans(reply, "information")
        if system == HIERARCHICAL:
            leaders = [e for turn in episode.turns for e in turn.verifier["agents"].values() if hasattr(e, "decision")]
            assert [e.decision for e in leaders] == ["wave"] * t.hops + ["handover"]
    assert played_questions >= 30


def test_observations_carry_no_pretraining_loss(tiny_tokenizer, demos):
    rng = random.Random(0)
    searcher = [d for d in (demos[CASCADED].draw(rng) for _ in range(40)) if _role(d.messages) == SEARCHER][:6]
    batch = collate(tiny_tokenizer, searcher)
    for row, demo in enumerate(searcher):
        labels = batch["labels"][row].tolist()
        trained = [ids for ids, is_trained in demo.segments if is_trained]
        observed = [ids for ids, is_trained in demo.segments if not is_trained]
        assert observed
        supervised = [label for label in labels if label != IGNORE]
        assert supervised == [t for ids in trained for t in ids] + [tiny_tokenizer.eos_token_id]


def test_the_students_searcher_answers_a_share_of_its_subtasks_without_searching(tiny_tokenizer, index):
    rng = random.Random(1)
    for confusion in (0.0, 0.6):
        demos = SearchDemonstrations(tiny_tokenizer, HIERARCHICAL, confusion, retriever=index)
        replies = [d.reply for d in (demos.draw(rng) for _ in range(300)) if _role(d.messages) == SEARCHER]
        guessed = sum(r.startswith("<answer>") and "<search>" not in r for r in replies) / len(replies)
        assert abs(guessed - confusion) < 0.1, (confusion, guessed)


def test_the_teacher_judges_right_reports_yes_and_wrong_ones_no(demos):
    """The judge's demonstrations (the teacher's only): a Searcher's reply to a one-hop subtask,
    "yes" when it reports the subtask's value, "no" for a guess without a search or a report of
    another value; the two verdicts about equally often."""
    rng = random.Random(3)
    d = demos[CASCADED]
    judged = [j for j in (d._judgement(task(rng.randrange(1000)), rng) for _ in range(200)) if j is not None]
    assert len(judged) >= 150
    verdicts = {"yes": 0, "no": 0}
    for j in judged:
        assert j.messages == d.workflow.judge_messages(*_judged(j))
        subtask, reply = _judged(j)
        [hop] = [h for h in hops(j.task) if h.question == subtask]
        right = reply.endswith(f"<summary>{hop.value}</summary>") and "<search>" in reply
        assert j.reply == ("yes" if right else "no"), reply
        verdicts[j.reply] += 1
    assert abs(verdicts["yes"] - verdicts["no"]) < 0.2 * len(judged)


def _judged(demo) -> tuple[str, str]:
    """The subtask and the reply a judge demonstration's compact messages hold."""
    task_line, reply = demo.messages[1]["content"].split("\nReply: ", 1)
    return task_line.removeprefix("Task: "), reply


def test_every_role_is_demonstrated(demos):
    rng = random.Random(2)
    for system, expected in ((HIERARCHICAL, {LEADER, SEARCHER, ANSWERER}), (CASCADED, {SEARCHER, ANSWERER, JUDGE})):
        assert {_role(demos[system].draw(rng).messages) for _ in range(60)} == expected


def test_every_recipe_has_heads_that_vllm_s_cpu_attention_accepts_and_search_has_its_own_size():
    assert all(recipe(domain).size["head_dim"] >= 32 for domain in ("math", "code", "search"))
    assert recipe("search").size != recipe("math").size == recipe("code").size


def test_the_recipe_exports_the_search_world(tmp_path):
    root = Path(__file__).parents[2]
    names = {
        "STUDENT_MODEL",
        "TEACHER_MODEL",
        "TRAIN_FILES",
        "VAL_FILES",
        "RETRIEVER",
        "MASOPD_PROMPT_STYLE",
        "MASOPD_TINY_MODELS",
    }
    env = {k: v for k, v in os.environ.items() if k not in names}
    command = [sys.executable, "recipes/tiny_world.py", "--cache", str(tmp_path), "--domain", "qa"]
    printed = subprocess.run(
        [*command, "--train", "8", "--heldout", "4"], cwd=root, env=env, check=True, capture_output=True, text=True
    ).stdout
    exports = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in printed.splitlines())
    assert set(exports) == names
    assert Path(exports["STUDENT_MODEL"]) == WEIGHTS / "search" / "student"
    assert (Path(exports["RETRIEVER"]) / INDEX_MANIFEST).is_file()
    assert Path(exports["TRAIN_FILES"]).is_file() and Path(exports["VAL_FILES"]).is_file()
    assert exports["MASOPD_PROMPT_STYLE"] == "compact"


def test_the_tiny_search_preset_holds_the_budgets_the_models_were_built_for():
    cfg = compose_config(["preset=tiny_search", "workflow.name=search", "workflow.domain=qa"])
    options = OmegaConf.to_container(cfg.workflow.options)
    assert {**options, "prompt_style": cfg.workflow.prompt_style} == OPTIONS
    assert cfg.workflow.horizon == HORIZONS[HIERARCHICAL]
    assert cfg.data.max_response_length >= OPTIONS["max_calls"] * OPTIONS["max_obs_tokens"] + 100
