"""A tool with an effect cut off by a crash is in doubt: it is not run again blindly.

On recovery the step sees that an earlier run started and never finished. A tool that is not
safe to repeat (here `shell`, which appends to a file) is reported to the agent as "may have
happened", and the owner is asked whether to run it again: only an Approve runs it again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("answer", ["approve", None])
def test_a_tool_cut_off_by_a_crash_runs_again_only_if_the_owner_approves(
    tmp_path: Path, backend_url: str, answer: str | None
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {
                "tool_calls": [
                    {"name": "shell", "arguments": {"command": "sleep 3; echo ran >> runs.txt"}}
                ]
            },
            say("done", final=True),
        ],
    )
    server = ServerProcess(
        tmp_path / "data",
        backend_url,
        model=model,
        env={"NIGHTOWL_APPROVAL_TIMEOUT_S": "20" if answer else "2"},
    ).start()
    with server.client() as client:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        client.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "m1", "text": "count the runs"},
        )

    def shell_runs() -> list[tuple[object, ...]]:
        return rows(
            backend_url,
            "SELECT finished_at, is_error FROM tool_runs WHERE conversation_id = :c "
            "AND tool = 'shell' ORDER BY started_at",
            c=conversation,
        )

    wait_for(lambda: len(shell_runs()) == 1, timeout=60, interval=0.02)
    server.kill()
    server.start()
    try:
        with server.client() as client:

            def rerun_question() -> dict[str, object] | None:
                listed = client.get(f"/v1/conversations/{conversation}/messages").json()
                return next(
                    (m for m in listed["messages"] if "Run this action again?" in m["body"]),
                    None,
                )

            question = wait_for(rerun_question, timeout=60)
            assert "may already have happened" in str(question["body"])
            if answer:
                decided = client.post(
                    f"/v1/approvals/{question['id']}",
                    json={"client_id": "a1", "decision": answer},
                )
                assert decided.status_code in (200, 201), decided.text
            wait_for(
                lambda: (
                    rows(
                        backend_url,
                        "SELECT status FROM turns WHERE conversation_id = :c",
                        c=conversation,
                    )
                    == [("done",)]
                ),
                timeout=90,
            )
            bodies = [
                m["body"]
                for m in client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
            ]
        assert bodies[-1] == "done"
        results = [
            str(payload)
            for (payload,) in rows(
                backend_url,
                "SELECT payload FROM transcript_entries WHERE conversation_id = :c "
                "AND entry_key LIKE '%:tool:0.0'",
                c=conversation,
            )
        ]
        assert len(results) == 1
        runs = shell_runs()
        if answer:
            # Run again: the cut-off run, the in-doubt record, and the approved run.
            assert len(runs) == 3 and runs[-1][0] is not None
            assert "Unknown outcome" not in results[0]
        else:
            # Not run again: the agent reads that it may have happened.
            assert len(runs) == 2
            assert "Unknown outcome" in results[0] and "may or may not" in results[0]
        audit = [
            kind
            for (kind,) in rows(
                backend_url,
                "SELECT kind FROM audit_events WHERE conversation_id = :c AND tool = 'shell'",
                c=conversation,
            )
        ]
        assert ("approved" in audit) == bool(answer)
    finally:
        server.stop()
