"""The training problem stream: parquet rows read through Problem.from_row with errors naming
file and row, a seeded per-epoch order, and a saved position that restores the exact order."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_masopd.trainer.data import DataPosition, ProblemStream, epoch_order, read_problems


def math_row(uid: str, answer: str = "2") -> dict:
    return {
        "data_source": "toy",
        "prompt": [{"role": "user", "content": f"Problem {uid}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"index": int(uid), "id": uid, "split": "train", "problem": f"Problem {uid}"},
    }


def write_rows(path, rows) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.fixture
def two_files(tmp_path):
    first = write_rows(tmp_path / "a.parquet", [math_row(str(i)) for i in range(4)])
    second = write_rows(tmp_path / "b.parquet", [math_row(str(i)) for i in range(4, 7)])
    return [first, second]


def uids(batch) -> list[str]:
    return [p.uid for p in batch]


def test_rows_of_every_file_become_problems_in_file_order(two_files):
    problems = read_problems(two_files, domain="math")
    assert [p.uid for p in problems] == ["0", "1", "2", "3", "4", "5", "6"]
    assert problems[5].answer == "2" and problems[5].statement == "Problem 5"


def test_a_row_missing_a_field_is_named_with_file_and_row(tmp_path):
    bad = math_row("1")
    bad["reward_model"] = {"style": "rule", "ground_truth": ""}
    path = write_rows(tmp_path / "bad.parquet", [math_row("0"), bad])
    with pytest.raises(ValueError, match=r"bad\.parquet, row 1: row 1: field 'reward_model.ground_truth' is missing"):
        read_problems([path])


def test_other_domain_duplicate_ids_and_missing_files_are_refused(tmp_path, two_files):
    with pytest.raises(ValueError, match=r"a\.parquet, row 0: a math problem, but the run's workflow.domain is code"):
        read_problems(two_files, domain="code")
    duplicate = write_rows(tmp_path / "dup.parquet", [math_row("3")])
    with pytest.raises(ValueError, match=r"dup\.parquet, row 0: problem id '3' already used at .*a\.parquet, row 3"):
        read_problems([two_files[0], duplicate])
    with pytest.raises(FileNotFoundError, match="absent.parquet"):
        read_problems([str(tmp_path / "absent.parquet")])


def test_epoch_order_is_a_seeded_permutation_that_changes_per_epoch():
    first = epoch_order(7, seed=3, epoch=0)
    assert sorted(first.tolist()) == list(range(7))
    np.testing.assert_array_equal(first, epoch_order(7, seed=3, epoch=0))
    assert not np.array_equal(first, epoch_order(7, seed=3, epoch=1))
    assert not np.array_equal(first, epoch_order(7, seed=4, epoch=0))
    np.testing.assert_array_equal(epoch_order(7, seed=3, epoch=5, shuffle=False), np.arange(7))
    np.testing.assert_array_equal(first, np.random.default_rng([3, 0]).permutation(7))


def test_batches_follow_the_order_and_skip_a_short_remainder(two_files):
    problems = read_problems(two_files)
    stream = ProblemStream(problems, batch_size=3, seed=11)
    order0 = epoch_order(7, 11, 0)
    order1 = epoch_order(7, 11, 1)
    assert stream.batches_per_epoch == 2
    assert uids(stream.next_batch()) == [str(i) for i in order0[0:3]]
    assert uids(stream.next_batch()) == [str(i) for i in order0[3:6]]
    assert stream.position == DataPosition(0, 6)
    # Problem order0[6] is the remainder: the third batch starts epoch 1.
    assert uids(stream.next_batch()) == [str(i) for i in order1[0:3]]
    assert stream.position == DataPosition(1, 3)


def test_a_restored_stream_continues_with_exactly_the_same_batches(two_files):
    problems = read_problems(two_files)
    uninterrupted = ProblemStream(problems, batch_size=2, seed=5)
    expected = [uids(uninterrupted.next_batch()) for _ in range(9)]

    before = ProblemStream(problems, batch_size=2, seed=5)
    seen = [uids(before.next_batch()) for _ in range(4)]
    saved = before.state_dict()
    assert saved == {"epoch": 1, "index": 2, "seed": 5, "shuffle": True, "batch_size": 2, "num_problems": 7}

    resumed = ProblemStream(problems, batch_size=2, seed=5)
    resumed.load_state_dict(saved)
    seen += [uids(resumed.next_batch()) for _ in range(5)]
    assert seen == expected


def test_restoring_into_a_stream_with_another_order_is_refused(two_files):
    problems = read_problems(two_files)
    saved = ProblemStream(problems, batch_size=2, seed=5).state_dict()
    with pytest.raises(ValueError, match=r"seed: saved 5, now 6"):
        ProblemStream(problems, batch_size=2, seed=6).load_state_dict(saved)
    with pytest.raises(ValueError, match=r"num_problems: saved 7, now 4"):
        ProblemStream(problems[:4], batch_size=2, seed=5).load_state_dict(saved)


def test_too_few_problems_for_one_batch_is_refused(two_files):
    with pytest.raises(ValueError, match=r"7 training problems cannot fill one batch of 8 \(data.train_batch_size\)"):
        ProblemStream(read_problems(two_files), batch_size=8, seed=0)
