"""A scripted stand-in for the local model's worker: the same JSON-lines protocol, no llama.cpp.

Run as `python standin_worker.py [--pids FILE] [--hang-once FILE]`. What it does per request
is chosen by words in the prompt:
- `[segv]` / `[sigkill]`: it kills itself with that signal, mid-call, without answering;
- `[exit]`: it says why on stderr and exits with status 3;
- `[slow]`: it answers after a second (it ignores cancels, the worst case for the protocol);
- otherwise it answers at once: `echo: <the last user message>`; a prompt primed for a tool call
  gets a `send_to_user` call (final) instead.
`--pids FILE` appends its pid to FILE when it starts; `--crash SIGSEGV` dies of that signal at
every request. `--hang-once FILE`: the first request
whose prompt holds `[hang]` (so the server's start-up model check is not the one) and finds no
FILE writes the pid there and never answers (a test kills it from outside); later requests, in
this or a fresh process, are answered.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

PRIMER = "<tool_call>\n"  # what the adapter primes a reply with when it must be a call
USER = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.DOTALL)


def answer(request: dict[str, Any], previous: dict[str, str], options: argparse.Namespace) -> None:
    prompt = str(request["prompt"])
    hang_once: Path | None = options.hang_once
    if options.crash:
        os.kill(os.getpid(), signal.Signals[options.crash])
    if "[segv]" in prompt:
        os.kill(os.getpid(), signal.SIGSEGV)
    if "[sigkill]" in prompt:
        os.kill(os.getpid(), signal.SIGKILL)
    if hang_once is not None and "[hang]" in prompt and not hang_once.exists():
        hang_once.write_text(str(os.getpid()))
        while True:
            time.sleep(60)
    if "[exit]" in prompt:
        print("stand-in: cannot go on", file=sys.stderr, flush=True)
        sys.exit(3)
    if "[slow]" in prompt:
        time.sleep(1.0)
    slot = str(request.get("slot", "main"))
    shared = 0
    for a, b in zip(prompt, previous.get(slot, ""), strict=False):
        if a != b:
            break
        shared += 1
    previous[slot] = prompt
    if prompt.endswith(PRIMER) and request.get("call_schema"):
        reply = {"text": "I am the stand-in.", "final": True}
        text = json.dumps({"name": "send_to_user", "arguments": reply}) + "\n"
    else:
        said = USER.findall(prompt)
        text = "echo: " + (said[-1] if said else "")
    line = {
        "id": request["id"],
        "text": text,
        "prompt_tokens": len(prompt),
        "cached_tokens": shared,
        "output_tokens": len(text),
    }
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pids", type=Path)
    parser.add_argument("--hang-once", type=Path)
    parser.add_argument("--crash", choices=["SIGSEGV", "SIGKILL", "SIGABRT"])
    args = parser.parse_args()
    if args.pids is not None:
        with args.pids.open("a") as pids:
            pids.write(f"{os.getpid()}\n")
    previous: dict[str, str] = {}
    for raw in sys.stdin:
        message = json.loads(raw)
        if "cancel" not in message:
            answer(message, previous, args)


if __name__ == "__main__":
    main()
