"""The core benchmark runs end to end on a real server and reports sane figures."""

from __future__ import annotations

from benchmarks.core_throughput import one_run


def test_one_benchmark_run(redis_server) -> None:
    client = redis_server.client()
    figures = one_run(client, 2000)
    client.close()
    rates = {k: v for k, v in figures.items() if "lateness" not in k}
    assert len(rates) == 4 and all(v > 100 for v in rates.values())  # messages/s
    # Generous bound: a waiting consumer sees a due message well within half a second.
    assert 0 <= figures["waiting pop lateness p99 (ms)"] < 500
