"""`nightowl doctor`: each check and what to do, the local model's check alone, and a bad
configuration refused with the variable named."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.cli.commands import data_env, run_nightowl


def test_doctor_reports_each_check_and_what_to_do(tmp_path: Path) -> None:
    fresh = run_nightowl("doctor", env=data_env(tmp_path))
    assert fresh.returncode == 1 and "[FAIL] migrations" in fresh.stdout
    assert "nightowl serve" in fresh.stdout  # says what to do
    run_nightowl("token", "list", env=data_env(tmp_path))  # any store command migrates it
    healthy = run_nightowl("doctor", env=data_env(tmp_path))
    assert healthy.returncode == 0, healthy.stdout
    for name in ("database", "migrations", "engine", "model", "sandbox", "backend bubblewrap"):
        assert f"] {name}:" in healthy.stdout
    for name in (
        "backend gvisor",
        "cgroups",
        "egress",
        "desktop",
        "browser",
        "memory search",
        "channels",
    ):
        assert f"] {name}:" in healthy.stdout
    broken = run_nightowl(
        "doctor",
        env=data_env(
            tmp_path,
            NIGHTOWL_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:5432/nw_does_not_exist",
            NIGHTOWL_MODEL="scripted:/nonexistent.json",
        ),
    )
    assert broken.returncode == 1
    assert "[FAIL] database" in broken.stdout and "fix:" in broken.stdout
    assert "[FAIL] model" in broken.stdout


STANDIN = Path(__file__).parent.parent / "models" / "standin_worker.py"


def test_doctor_model_reports_a_crashing_local_model_plainly(tmp_path: Path) -> None:
    """`nightowl doctor --model` (what `make run` runs first) has the local model answer a
    short generation in a process of its own: a crash there is named, with what to do."""
    crashing = run_nightowl(
        "doctor",
        "--model",
        env=data_env(
            tmp_path,
            NIGHTOWL_MODEL="local",
            NIGHTOWL_LOCAL_MODEL_COMMAND=f"{sys.executable} {STANDIN} --crash SIGSEGV",
        ),
    )
    assert crashing.returncode == 1
    assert "[FAIL] model: the local model crashed (signal SIGSEGV)" in crashing.stdout
    assert "make clean run" in crashing.stdout  # what to do
    assert "database" not in crashing.stdout  # only the model's check
    answering = run_nightowl(
        "doctor",
        "--model",
        env=data_env(
            tmp_path,
            NIGHTOWL_MODEL="local",
            NIGHTOWL_LOCAL_MODEL_COMMAND=f"{sys.executable} {STANDIN}",
        ),
    )
    assert answering.returncode == 0, answering.stdout
    assert "[ok  ] model: local model answered in its own process" in answering.stdout


@pytest.mark.slow
def test_doctor_model_runs_a_short_generation_of_the_real_local_model(tmp_path: Path) -> None:
    result = run_nightowl("doctor", "--model", env=data_env(tmp_path, NIGHTOWL_MODEL="local"))
    assert result.returncode == 0, result.stdout
    assert "local model answered in its own process" in result.stdout


def test_bad_configuration_is_refused_with_the_variable_named(tmp_path: Path) -> None:
    result = run_nightowl("doctor", env=data_env(tmp_path, NIGHTOWL_MODEL="gpt:whatever"))
    assert result.returncode != 0
    assert "NIGHTOWL_MODEL" in result.stderr and "unknown model kind" in result.stderr
    lapsing = run_nightowl(
        "doctor",
        env=data_env(
            tmp_path,
            NIGHTOWL_CHANNEL_RELOAD_S="10",
            NIGHTOWL_CHANNEL_LISTENER_LEASE_S="15",
        ),
    )
    assert lapsing.returncode != 0
    assert "NIGHTOWL_CHANNEL_LISTENER_LEASE_S (15) must be at least twice" in lapsing.stderr
