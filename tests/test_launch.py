"""The `graphcost` command starts itself again once with glibc's per-thread cache off."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from graphcost import launch


def test_restart_env_turns_the_cache_off_and_keeps_other_tunables(monkeypatch):
    monkeypatch.setattr(launch.platform, "libc_ver", lambda: ("glibc", "2.36"))
    assert launch.restart_env({"HOME": "/h"}) == {"HOME": "/h",
                                                   "GLIBC_TUNABLES": launch.NO_TCACHE}
    env = launch.restart_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert env == {"GLIBC_TUNABLES": f"glibc.malloc.arena_max=2:{launch.NO_TCACHE}"}


def test_restart_env_leaves_a_set_cache_and_other_c_libraries_alone(monkeypatch):
    monkeypatch.setattr(launch.platform, "libc_ver", lambda: ("glibc", "2.36"))
    # once restarted, or the user's own value: no second start
    assert launch.restart_env({"GLIBC_TUNABLES": launch.NO_TCACHE}) is None
    assert launch.restart_env({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=7"}) is None
    monkeypatch.setattr(launch.platform, "libc_ver", lambda: ("", ""))  # musl, macOS
    assert launch.restart_env({}) is None


def test_main_starts_python_m_graphcost_with_the_same_arguments(monkeypatch):
    monkeypatch.setattr(launch.platform, "libc_ver", lambda: ("glibc", "2.36"))
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/graphcost", "train", "data", "--out", "r"])
    started = []

    def execve(path, args, env):
        started.append((path, args, env))
        raise SystemExit(0)  # execve does not return

    monkeypatch.setattr(launch.os, "execve", execve)
    with pytest.raises(SystemExit):
        launch.main()
    [(path, args, env)] = started
    assert path == sys.executable
    assert args == [sys.executable, "-P", "-m", "graphcost", "train", "data", "--out", "r"]
    assert env["GLIBC_TUNABLES"] == launch.NO_TCACHE


def test_the_restarted_command_runs_and_keeps_its_exit_status(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    code = "import sys; sys.argv = ['graphcost', *sys.argv[1:]]; " \
           "from graphcost.launch import main; main()"
    # a user's file of that name in the working directory does not stand in for the package
    (tmp_path / "graphcost.py").write_text("raise SystemExit('not graphcost')\n")
    ok = subprocess.run([sys.executable, "-P", "-c", code, "--version"], env=env,
                        cwd=tmp_path, capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "graphcost, version" in ok.stdout
    bad = subprocess.run([sys.executable, "-P", "-c", code, "no-such-command"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "No such command" in bad.stderr
