"""What a worker decodes next (hasrd/worker/batchpolicy.py): the policy with plain values, no models, no threads."""

from __future__ import annotations

from hasrd.worker.batchpolicy import Wait, may_start, next_batch, order_jobs

ENC = ("encode", (80, 3000))


def w(seq: int, job: int, *, live: bool = False, key: object = ENC, items: int = 1, born: int = 0,
      short: bool = False) -> Wait:
    return Wait(seq, job, live, key, items, born, short)


def jobs_of(batch: list[Wait]) -> list[int]:
    return [x.job for x in batch]


def test_nothing_waiting_gives_an_empty_batch() -> None:
    assert next_batch([], {}, 8) == []


def test_a_live_step_leads_even_when_files_waited_longer() -> None:
    waits = [w(0, 1), w(1, 2), w(2, 9, live=True)]
    assert next_batch(waits, {}, 1) == [waits[2]]


def test_live_steps_lead_oldest_first_and_fill_before_files() -> None:
    waits = [w(0, 1), w(1, 8, live=True), w(2, 9, live=True)]
    assert jobs_of(next_batch(waits, {}, 2)) == [8, 9]
    assert jobs_of(next_batch(waits, {}, 8)) == [8, 9, 1]


def test_files_take_turns_so_a_short_file_is_not_behind_a_long_one() -> None:
    # the long file (job 1) was served in the last batch; the short one (job 2) arrived later but goes first
    waits = [w(0, 1), w(5, 2)]
    assert jobs_of(next_batch(waits, {1: 7}, 1)) == [2]
    assert jobs_of(next_batch(waits, {1: 7, 2: 8}, 1)) == [1]


def test_a_job_never_served_goes_before_one_served_and_new_jobs_go_in_arrival_order() -> None:
    waits = [w(3, 5), w(1, 4), w(0, 6)]
    assert order_jobs(waits, {6: 1}) == [4, 5, 6]


def test_only_steps_with_the_leads_key_share_its_batch() -> None:
    gen = ("generate", "beam5")
    waits = [w(0, 1, key=gen), w(1, 2, key=ENC), w(2, 3, key=gen), w(3, 4, key=("generate", "beam1"))]
    assert jobs_of(next_batch(waits, {}, 8)) == [1, 3]


def test_the_batch_stays_within_max_items_and_skips_a_step_that_does_not_fit() -> None:
    waits = [w(0, 1, items=2), w(1, 2, items=4), w(2, 3, items=1)]
    batch = next_batch(waits, {}, 4)
    assert jobs_of(batch) == [1, 3]
    assert sum(x.items for x in batch) <= 4


def test_the_lead_runs_alone_when_it_alone_is_larger_than_max_items() -> None:
    waits = [w(0, 1, items=16), w(1, 2, items=1)]
    assert jobs_of(next_batch(waits, {}, 8)) == [1]


def test_a_batch_takes_one_step_per_job_per_round() -> None:
    # job 1 has three steps waiting (the hybrid's windows beside its draft), job 2 one: the batch alternates
    waits = [w(0, 1), w(1, 1), w(2, 1), w(3, 2)]
    assert jobs_of(next_batch(waits, {}, 3)) == [1, 2, 1]


def test_the_policy_is_a_pure_function_of_its_arguments() -> None:
    waits = [w(0, 1), w(1, 2, live=True), w(2, 3)]
    served = {1: 3}
    assert next_batch(waits, served, 2) == next_batch(list(waits), dict(served), 2)
    assert served == {1: 3}


def test_the_key_with_the_most_items_waiting_leads_so_that_jobs_fall_into_step() -> None:
    gen = ("generate", "beam5")
    # job 1 was served longest ago, but three jobs wait to generate: one call serves them all
    waits = [w(0, 1, key=ENC, born=8), w(1, 2, key=gen, born=8), w(2, 3, key=gen, born=8), w(3, 4, key=gen, born=8)]
    assert jobs_of(next_batch(waits, {1: 0, 2: 5, 3: 6, 4: 7}, 8, now=8)) == [2, 3, 4]


def test_a_file_step_that_waited_patience_batches_leads_however_small_its_key() -> None:
    gen = ("generate", "beam5")
    waits = [w(0, 1, key=ENC, born=3), w(1, 2, key=gen, born=4), w(2, 3, key=gen, born=4)]
    assert jobs_of(next_batch(waits, {}, 8, now=4, patience=2)) == [2, 3]
    assert jobs_of(next_batch(waits, {}, 8, now=5, patience=2)) == [1]


def test_a_live_step_leads_even_over_a_starved_file_step() -> None:
    waits = [w(0, 1, born=0), w(1, 9, live=True, key=("live",), born=9)]
    assert jobs_of(next_batch(waits, {}, 8, now=9)) == [9]


def test_a_short_jobs_step_leads_after_live_ones_and_before_long_files_that_waited() -> None:
    waits = [w(0, 1, born=0), w(1, 2, key=("generate",), born=0), w(2, 3, short=True, born=5),
             w(3, 9, live=True, key=("live",), born=5)]
    assert jobs_of(next_batch(waits, {}, 8, now=5)) == [9]
    assert jobs_of(next_batch(waits[:3], {}, 8, now=5)) == [3, 1]  # a long file with its key joins it
    assert len(next_batch(waits[:3], {}, 8, now=5)) == len({id(x) for x in next_batch(waits[:3], {}, 8, now=5)})


def test_one_lane_takes_any_step_when_free_and_none_while_busy() -> None:
    assert may_start(1, running=0, running_files=0, urgent_waiting=True, files_waiting=True) == "any"
    assert may_start(1, running=1, running_files=0, urgent_waiting=True, files_waiting=True) == "none"


def test_long_files_leave_one_lane_for_live_and_short_jobs() -> None:
    assert may_start(3, running=1, running_files=1, urgent_waiting=True, files_waiting=True) == "any"
    assert may_start(3, running=2, running_files=2, urgent_waiting=False, files_waiting=True) == "none"
    assert may_start(3, running=2, running_files=2, urgent_waiting=True, files_waiting=True) == "urgent"
    assert may_start(3, running=3, running_files=2, urgent_waiting=True, files_waiting=True) == "none"
    assert may_start(2, running=1, running_files=1, urgent_waiting=True, files_waiting=True) == "urgent"


def test_live_steps_leave_one_lane_for_waiting_files_but_take_every_lane_when_no_file_waits() -> None:
    assert may_start(3, running=2, running_files=0, urgent_waiting=True, files_waiting=True) == "files"
    assert may_start(3, running=2, running_files=0, urgent_waiting=True, files_waiting=False) == "urgent"
    assert may_start(2, running=1, running_files=0, urgent_waiting=True, files_waiting=True) == "files"


def test_an_urgent_only_batch_holds_live_and_short_steps_and_a_files_only_batch_none_of_them() -> None:
    waits = [w(0, 1), w(1, 2, short=True), w(2, 3, live=True), w(3, 4)]
    assert jobs_of(next_batch(waits, {}, 8, allow="urgent")) == [3, 2]
    assert jobs_of(next_batch(waits, {}, 8, allow="files")) == [1, 4]
    assert next_batch([w(0, 1), w(1, 4)], {}, 8, allow="urgent") == []


def test_with_lanes_a_batch_led_by_a_live_step_takes_no_long_files_step() -> None:
    waits = [w(0, 1, items=8), w(1, 9, live=True), w(2, 3, short=True), w(3, 4, items=8)]
    assert jobs_of(next_batch(waits, {}, 32)) == [9, 3, 1, 4]  # one lane: the live call is filled with files
    assert jobs_of(next_batch(waits, {}, 32, mix=False)) == [9, 3]
    assert jobs_of(next_batch([waits[0], waits[3]], {}, 32, mix=False)) == [1, 4]  # files still batch together
