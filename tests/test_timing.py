"""The interleaved timer's turn order, with a stand-in for CuPy's events (no GPU)."""
from types import SimpleNamespace

from tilegemm import gpu, timing


def test_every_run_takes_every_place_in_the_turn(monkeypatch):
    order = []

    class Event:
        def record(self, stream):
            pass

        def synchronize(self):
            pass

    cuda = SimpleNamespace(get_current_stream=lambda: None, Event=Event, get_elapsed_time=lambda a, b: 1.0)
    monkeypatch.setattr(gpu, "cupy", lambda: SimpleNamespace(cuda=cuda))
    runs = [lambda i, j=j: order.append(j) for j in range(3)]
    ms = timing.time_interleaved(runs, n_sets=2, target_s=0.0, batch_ms=1.0)
    assert len(ms) == 3
    # after the warm-up (two batches of one per run, each with the launch queued first: 12 calls),
    # five turns of batches of one, 2 calls each; every turn takes each run once, in a new order
    turns = [order[12 + 6 * t: 18 + 6 * t: 2] for t in range(5)]
    assert len(order) == 12 + 6 * 5 and all(sorted(t) == [0, 1, 2] for t in turns)
    # some run follows different runs in different turns (a fixed order or a rotation gives every
    # run one predecessor within the turns)
    before = {j: {t[k - 1] for t in turns for k in (1, 2) if t[k] == j} for j in range(3)}
    assert any(len(b) > 1 for b in before.values()), before


def test_graph_timing_captures_each_batch_once_and_replays_it(monkeypatch):
    calls, captured, launched = [], [], []

    class Event:
        def record(self, stream):
            pass

        def synchronize(self):
            pass

    class Stream:
        capturing = False

        def __init__(self, non_blocking=False):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def begin_capture(self):
            assert waited, "the timing stream waits for the caller's stream first"
            Stream.capturing = True

        def wait_event(self, event):
            waited.append(event)

        def end_capture(self):
            Stream.capturing = False
            graph = SimpleNamespace(launch=lambda stream: launched.append(graph))
            captured.append(graph)
            return graph

    waited = []
    current = SimpleNamespace(record=lambda: "inputs filled")
    cuda = SimpleNamespace(Stream=Stream, Event=Event, get_elapsed_time=lambda a, b: 1.0,
                           get_current_stream=lambda: current)
    monkeypatch.setattr(gpu, "cupy", lambda: SimpleNamespace(cuda=cuda))
    runs = [lambda i, j=j: calls.append((j, i, Stream.capturing)) for j in range(2)]
    ms = timing.time_interleaved(runs, n_sets=3, target_s=0.0, batch_ms=1.0, graph=True)
    assert len(ms) == 2 and len(captured) == 2
    # every timed batch is a replay (the graph's first launch is the warm-up replay), and the calls
    # made while capturing are the batch's calls
    assert len(launched) == 2 * (1 + 5) and {id(g) for g in launched} == {id(g) for g in captured}
    assert sum(c[2] for c in calls) == 2 and waited == ["inputs filled"]
