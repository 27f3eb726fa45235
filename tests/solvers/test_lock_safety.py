"""The snapshot prefix's lock file in a shared folder: pycaffe writes its pid only
into a regular file of its own, never through a link, into a pipe or another user's file."""
import os
import stat

import pytest

from pycaffe_cli.errors import CaffeError
from pycaffe_cli.solvers import run_lock
from pycaffe_cli.solvers.run_lock import snapshot_prefix_lock
from tests.cli.conftest import interactive_sigint, run_cli  # noqa: F401 (fixtures)

NET = """name: "tiny"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 }
                           data_filler { type: "gaussian" }
                           data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "z" bottom: "y" top: "loss" }
"""
ADVICE = ("; pycaffe locks a snapshot prefix only with a regular file of its own: remove it, "
          "or give this run another snapshot_prefix")


def victim_file(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("another user's data\n")
    return victim


def refused(prefix):
    with pytest.raises(CaffeError) as caught:
        with snapshot_prefix_lock(prefix):
            pytest.fail("the lock was taken")
    return str(caught.value)


def test_train_refuses_a_lock_that_links_to_a_victim(run_cli, tmp_path):
    victim = victim_file(tmp_path)
    before = victim.stat()
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "net.prototxt").write_text(NET)
    (folder / "solver.prototxt").write_text(
        f'net: "{folder / "net.prototxt"}"\nbase_lr: 0.1\nlr_policy: "fixed"\nmax_iter: 1\n'
        f'snapshot_prefix: "{folder / "m"}"\ndisplay: 0\n')
    os.symlink(victim, folder / "m.lock")
    result = run_cli("train", "--solver", folder / "solver.prototxt")
    assert result.code == 1 and "Traceback" not in result.err
    assert result.error_lines() == [f"pycaffe: error: lock file '{folder / 'm.lock'}' is a "
                                    f"symbolic link{ADVICE}"]
    assert victim.read_text() == "another user's data\n"
    assert victim.stat().st_mtime_ns == before.st_mtime_ns
    assert os.readlink(folder / "m.lock") == str(victim)
    assert not any("_iter_" in name for name in os.listdir(folder))


def test_a_dangling_link_is_refused_and_nothing_is_created(tmp_path):
    os.symlink(tmp_path / "created-by-the-lock", tmp_path / "m.lock")
    assert refused(str(tmp_path / "m")).endswith(f"'{tmp_path / 'm.lock'}' is a symbolic "
                                                 f"link{ADVICE}")
    assert not os.path.lexists(tmp_path / "created-by-the-lock")


def test_o_nofollow_refuses_a_link_that_appears_after_the_check(tmp_path, monkeypatch):
    """The lstat check and the open are two steps: the open itself never follows a link."""
    victim = victim_file(tmp_path)
    os.symlink(victim, tmp_path / "m.lock")
    monkeypatch.setattr(run_lock, "_check_lock_file", lambda path, info: None)
    assert "is a symbolic link" in refused(str(tmp_path / "m"))
    assert victim.read_text() == "another user's data\n"


@pytest.mark.parametrize("kind, problem", [
    ("fifo", "is a named pipe (FIFO), not a regular file"),
    ("folder", "is a directory, not a regular file")])
def test_a_lock_path_that_is_not_a_regular_file_is_refused(tmp_path, kind, problem):
    lock = tmp_path / "m.lock"
    os.mkfifo(lock) if kind == "fifo" else lock.mkdir()
    assert refused(str(tmp_path / "m")) == f"lock file '{lock}' {problem}{ADVICE}"
    assert stat.S_IFMT(os.lstat(lock).st_mode) == (stat.S_IFIFO if kind == "fifo"
                                                   else stat.S_IFDIR)


def test_another_users_lock_file_is_refused_untouched(tmp_path, monkeypatch):
    lock = tmp_path / "m.lock"
    lock.write_text("4242\n")
    owner = os.stat(lock).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)    # we are someone else now
    assert refused(str(tmp_path / "m")) == (f"lock file '{lock}' belongs to another user "
                                            f"(uid {owner}){ADVICE}")
    assert lock.read_text() == "4242\n"


def test_a_hard_link_to_one_of_our_files_is_refused(tmp_path):
    ours = victim_file(tmp_path)
    os.link(ours, tmp_path / "m.lock")
    assert refused(str(tmp_path / "m")) == (f"lock file '{tmp_path / 'm.lock'}' has 2 names "
                                            f"(hard links){ADVICE}")
    assert ours.read_text() == "another user's data\n"


def test_our_own_stale_lock_is_still_taken_over_and_removed(tmp_path):
    lock = tmp_path / "m.lock"
    lock.write_text("999999999\n")                 # left by a run killed with -9
    with snapshot_prefix_lock(str(tmp_path / "m")):
        assert lock.read_text() == f"{os.getpid()}\n"
        with pytest.raises(CaffeError, match=f"in use by another pycaffe run \\(pid "
                                             f"{os.getpid()}, lock file"):
            with snapshot_prefix_lock(str(tmp_path / "m")):
                pass
    assert not lock.exists()
