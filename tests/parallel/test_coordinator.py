"""Rank 0 decides for every rank: signals, stops, an interrupted test, snapshots."""
from types import SimpleNamespace

from pycaffe_cli.parallel import coordinator as coordinator_module
from pycaffe_cli.parallel.coordinator import Coordinator
from tests.parallel.test_communicator import on_ranks


def signals(*requests):
    """A signal handler's action() answering ``requests`` in turn, then "none"."""
    pending = list(requests)
    return lambda: pending.pop(0) if pending else "none"


def test_rank_0s_requests_reach_every_rank_one_per_iteration():
    def work(comm):
        coordinator = Coordinator(comm, signals("snapshot", "stop"))
        seen = []
        for _ in range(3):   # the loop: poll the action callback, then agree
            seen.append(coordinator.agree(coordinator.action()))
        return seen
    # SIGHUP's snapshot first, then SIGINT's stop (kept pending meanwhile), as Caffe answers
    assert on_ranks(2, work) == [["snapshot", "stop", "none"]] * 2


def test_a_snapshot_asked_during_a_test_waits_and_a_stop_is_at_once():
    coordinator = Coordinator(SimpleNamespace(is_root=True), signals("snapshot", "stop"))
    assert coordinator.action() == "none"     # rank 0 testing alone: no snapshot now
    assert coordinator.action() == "stop"     # but a stop interrupts the test


def test_an_interrupted_test_stops_the_other_ranks():
    def work(comm):
        coordinator = Coordinator(comm, signals("stop"))
        solver = SimpleNamespace(requested_early_exit=False)
        if comm.is_root:
            solver.requested_early_exit = coordinator.action() == "stop"
        coordinator.after_test(solver)
        return solver.requested_early_exit, coordinator.agree("none")
    assert on_ranks(2, work) == [(True, "none")] * 2   # the stop is not answered twice


def test_other_ranks_ignore_their_own_signals():
    def work(comm):
        coordinator = Coordinator(comm, signals("stop") if comm.rank == 1 else signals())
        return coordinator.action(), coordinator.agree("none")
    assert on_ranks(2, work) == [("none", "none")] * 2


def test_a_snapshot_holds_every_ranks_state_and_only_rank_0_writes(monkeypatch):
    written = []
    monkeypatch.setattr(coordinator_module.sidecar, "rank_state",
                        lambda net: {"rng": "rng of " + net, "train": {}})
    monkeypatch.setattr(coordinator_module.state_io, "write_snapshot",
                        lambda *args, other_ranks, plateau: written.append((args[1],
                                                                            other_ranks)))

    def work(comm):
        solver = SimpleNamespace(param=None, iter=7, net=f"net{comm.rank}", test_nets=[],
                                 current_step=0, history=[], run_id="r", plateau=None)
        Coordinator(comm).snapshot(solver)
    on_ranks(3, work)
    assert written == [(7, [{"rng": "rng of net1", "train": {}},
                            {"rng": "rng of net2", "train": {}}])]
