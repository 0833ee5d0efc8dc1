"""bench/server_turns.py, the turns of bench_models.py's servers: their orders (a balanced
Latin square), a process's CPU read per thread (never negative when a thread ends), and the
CPU a server burns after its reply, on a fake clock."""
import os
import subprocess
import sys
import threading

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
import server_turns  # noqa: E402


@pytest.mark.parametrize("count", [2, 3, 4, 5, 6])
def test_the_orders_are_a_balanced_latin_square(count):
    rows = server_turns.orders(count)
    assert len(rows) == (count if count % 2 == 0 else 2 * count)
    assert all(sorted(row) == list(range(count)) for row in rows)
    firsts = [row[0] for row in rows]
    assert all(firsts.count(index) == len(rows) // count for index in range(count))
    pairs = [(row[i], row[i + 1]) for row in rows for i in range(count - 1)]
    every = {(a, b) for a in range(count) for b in range(count) if a != b}
    assert set(pairs) == every
    assert all(pairs.count(pair) == len(pairs) // len(every) for pair in every)


def test_the_server_timed_after_tf1_is_each_other_server_in_turn():
    servers = ["af", "af[numpy]", "before", "tf1"]
    followers = [order[order.index("tf1") + 1]
                 for order in (server_turns.turns(servers, turn) for turn in range(4))
                 if order[-1] != "tf1"]
    assert sorted(followers) == ["af", "af[numpy]", "before"]
    assert server_turns.turns(servers, 4) == server_turns.turns(servers, 0)
    assert server_turns.turns([], 3) == []
    assert servers == ["af", "af[numpy]", "before", "tf1"]  # (not reordered in place)


@pytest.mark.parametrize("count", [2, 3, 4, 5])
@pytest.mark.parametrize("models", [1, 2, 3])
def test_each_model_walks_the_whole_square_over_its_rounds(count, models):
    # bench_models.py times TF1 and 1-4 asyncflow servers; a model's best round is its figure,
    # so each model's own rounds must be balanced, not only the rounds of all models together
    rows = server_turns.orders(count)
    for model in range(models):
        walked = [server_turns.round_order(range(count), round_index, model)
                  for round_index in range(len(rows))]
        assert sorted(walked) == sorted(rows)


def test_three_rounds_of_three_servers_put_each_other_server_right_after_tf1():
    # the default --rounds 3 with TF1 and two of ours, each of the three models
    servers = ["af", "before", "tf1"]
    for model in range(3):
        followers = {order[order.index("tf1") + 1]
                     for order in (server_turns.round_order(servers, round_index, model)
                                   for round_index in range(3))
                     if order[-1] != "tf1"}
        assert followers == {"af", "before"}


def test_cpu_used_counts_new_threads_from_zero_and_ended_ones_as_nothing():
    before = {"1": 100, "2": 500}
    after = {"1": 180, "3": 40}  # thread 2 ended, thread 3 started
    assert server_turns.cpu_used_ns(before, after) == 80 + 40
    assert server_turns.cpu_used_ns({"1": 100}, {"1": 90}) == 0  # (never negative)


def test_an_idle_child_reads_idle_after_its_start_and_a_gone_one_reads_empty():
    child = subprocess.Popen([sys.executable, "-c", "import sys; print(flush=True); "
                              "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # (its start's CPU is spent; it waits on its stdin now)
        started = server_turns.thread_cpu_ns(child.pid)
        assert started and all(ns > 0 for ns in started.values())
        times = iter(range(1000))  # (the windows' lengths: 0.05 s each, on a fake clock)
        shares = server_turns.cpu_after(child.pid, slices=3, slice_s=0.0,
                                        clock=lambda: next(times) * 0.05,
                                        sleep=lambda s: None)
        assert shares == [0.0, 0.0, 0.0]
    finally:
        child.kill()
        child.wait(timeout=30)
    assert server_turns.thread_cpu_ns(child.pid) == {}


def test_cpu_after_divides_each_slice_s_cpu_by_its_wall_time():
    readings = iter([{"1": 0}, {"1": 25_000_000}, {"1": 25_000_000}, {"1": 25_000_000}])
    times = iter([0.0, 0.05, 0.05, 0.10])
    shares = server_turns.cpu_after(1, slices=2, slice_s=0.05,
                                    cpu_ns=lambda pid: next(readings),
                                    clock=lambda: next(times), sleep=lambda s: None)
    assert shares == pytest.approx([0.5, 0.0])


def test_without_schedstat_the_threads_read_their_ticks_from_stat(monkeypatch):
    # (a kernel without schedstats: utime and stime, fields 14 and 15 of the task's stat)
    real = open

    def no_schedstat(path, *args, **kwargs):
        if str(path).endswith("/schedstat"):
            raise OSError(22, "schedstats off", path)
        return real(path, *args, **kwargs)

    expected = os.times()
    monkeypatch.setattr(server_turns, "open", no_schedstat, raising=False)
    times = server_turns.thread_cpu_ns(os.getpid())
    assert times[str(threading.main_thread().native_id)] > 0  # (pytest's start, on it)
    assert all(isinstance(ns, int) and ns >= 0 for ns in times.values())
    # the live threads' ticks are at most the process's (ended threads' too), up to a tick each
    total = (expected.user + expected.system) * 1e9
    tick = 1e9 / os.sysconf("SC_CLK_TCK")
    assert sum(times.values()) <= total + (len(times) + 1) * tick
