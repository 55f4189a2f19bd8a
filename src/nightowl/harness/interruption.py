"""What a preempted turn leaves behind: results for its cut-off calls and a note of what it did."""

from __future__ import annotations

from collections.abc import Sequence

from nightowl.messages import Entry

CUT_OFF = "Cancelled: the owner sent a new message before this finished."


def interruption_record(turn_entries: Sequence[Entry]) -> tuple[list[Entry], str]:
    """Tool results for every call the interrupted turn left unanswered, and a short note."""
    answered = {e.call_id for e in turn_entries if e.kind == "tool_result"}
    done = [e.tool_name for e in turn_entries if e.kind == "tool_result"]
    cut: list[Entry] = []
    for entry in turn_entries:
        if entry.kind != "assistant":
            continue
        for call in entry.tool_calls:
            if call.id not in answered:
                cut.append(
                    Entry(
                        kind="tool_result",
                        text=CUT_OFF,
                        call_id=call.id,
                        tool_name=call.name,
                        is_error=True,
                        trust="agent",
                    )
                )
    finished = ", ".join(done) if done else "nothing yet"
    stopped = ", ".join(e.tool_name for e in cut) if cut else "a model call"
    note = (
        "Your previous turn was interrupted because the owner sent a new message. "
        f"Finished before the interruption: {finished}. Cut off: {stopped}. "
        "Read the new message first; redo cut-off work only if it still applies."
    )
    return cut, note
