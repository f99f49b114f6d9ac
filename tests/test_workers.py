"""The parse pool's look-ahead (pipeline/execute/workers.py ``in_order``): how many jobs are in
flight at once, from the jobs' sizes, and results in job order whatever the look-ahead."""

from __future__ import annotations

import pytest

from scaletrace.pipeline.execute import workers


def _failed(reason: str) -> str:
    return f"failed: {reason}"


WORKERS = 2
MOST = workers.MAX_AHEAD_PER_WORKER * WORKERS  # 16 in flight at most


@pytest.mark.parametrize("sizes, in_flight", [
    (None, WORKERS + 1),  # no sizes: workers + 1, as ever
    ([1] * 20, WORKERS + 1),  # equal sizes: three already hold more than the largest (1)
    ([50, 50, 50, 1, 1], WORKERS + 1),  # the first three are always sent; 150 > 50 stops the rest
    ([1] * 19 + [100], MOST),  # small files ahead of a large one: up to 16, together 16 <= 100
    ([1] * 10 + [100], 10),  # ... until the large one, which would hold 110 > 100 with them
])
def test_jobs_in_flight_follow_their_sizes(sizes, in_flight):
    jobs = [(-i,) for i in range(len(sizes) if sizes else 20)]
    ordered = workers.in_order(abs, jobs, WORKERS, _failed, sizes=sizes)
    try:
        ordered.start()
        assert len(ordered._pending) == in_flight
        assert list(ordered) == [abs(job[0]) for job in jobs]  # every result, in job order
    finally:
        ordered.close()


def test_start_without_jobs_forks_nothing_and_yields_nothing():
    ordered = workers.in_order(abs, [], WORKERS, _failed, sizes=[])
    ordered.start()
    assert list(ordered) == []
