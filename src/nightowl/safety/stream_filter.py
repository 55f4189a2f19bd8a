"""Redacting a stream as it is written, and the program that runs a command that way.

A shell command's full output is kept as a file in the computer's home. When the owner has
secrets, the command runs under this program (inside the sandbox, as the sandbox's user): it
writes the command's output to the file through a `StreamRedactor`, so no form of a secret
reaches the file, even from a command that is killed or keeps running in the background.

This module uses the standard library only: its source runs in the sandbox as it is
(`python3 -c SOURCE SPEC OUTPUT MODE COMMAND...`), where nightowl is not installed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import select
import subprocess
import sys
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

CHUNK_BYTES = 64 * 1024
POLL_S = 0.05
QUIET_POLLS = 4  # after this many polls without output, what is held back shows, line by line


def reference(match: re.Match[bytes], names: tuple[str, ...]) -> bytes:
    """`[secret:NAME]` for a match (its last group, `s<i>_<form>`, names the secret)."""
    index = int((match.lastgroup or "s0_0")[1:].split("_")[0])
    return f"[secret:{names[index]}]".encode()


class StreamRedactor:
    """Redacts a stream chunk by chunk; what it returns is final (the last `holdback` bytes
    wait for the next chunk, since a form may continue there)."""

    def __init__(
        self,
        pattern: re.Pattern[bytes] | None,
        names: Iterable[str],
        holdback: int,
        line_safe: bool = False,
    ) -> None:
        self._pattern, self._names, self._holdback = pattern, tuple(names), holdback
        # No secret holds a line break, so no form of one spans a line's end.
        self._line_safe = line_safe
        self._pending = b""
        self.found = 0  # how many secrets were replaced so far

    def feed(self, chunk: bytes, final: bool = False) -> bytes:
        """The redacted bytes that can be written now."""
        data = self._pending + chunk
        if self._pattern is None:
            self._pending = b""
            return data
        limit = len(data) if final else len(data) - self._holdback
        out: list[bytes] = []
        done = 0
        # A form that starts before `limit` ends within the data (it spans at most
        # holdback + 1 bytes), so it is found whole.
        for match in self._pattern.finditer(data):
            if match.start() >= limit:
                break
            out += [data[done : match.start()], reference(match, self._names)]
            done = match.end()
            self.found += 1
        cut = max(done, limit)
        out.append(data[done:cut])
        self._pending = data[cut:]
        return b"".join(out)

    def close(self) -> bytes:
        """What was held back, redacted (the end of the stream)."""
        return self.feed(b"", final=True)

    def flush_lines(self) -> bytes:
        """While the stream is quiet: the held-back bytes up to the last line break, redacted
        (a server's "listening on ..." shows without waiting for more output)."""
        end = self._pending.rfind(b"\n") + 1 if self._line_safe else 0
        if not end:
            return b""
        rest, self._pending = self._pending[end:], self._pending[:end]
        done = self.feed(b"", final=True)
        self._pending = rest
        return done


def from_spec(spec: dict[str, object]) -> StreamRedactor:
    """A stream redactor from `RedactionSpec.to_dict()`."""
    source = str(spec.get("pattern") or "")
    pattern = re.compile(source.encode("latin-1")) if source else None
    names = [str(n) for n in spec.get("names") or ()]  # type: ignore[attr-defined]
    holdback = int(str(spec.get("holdback", 0)))
    return StreamRedactor(pattern, names, holdback, bool(spec.get("line_safe")))


def _chunks(source: int, process: subprocess.Popen[bytes], until_eof: bool) -> Iterator[bytes]:
    """What the command writes (b"" when it has been quiet for a while), until it ends (or,
    `until_eof`, until nothing holds the pipe open): a child it left running must not keep a
    finished command waiting."""
    quiet = 0
    while True:
        ready, _, _ = select.select([source], [], [], POLL_S)
        if ready:
            chunk = os.read(source, CHUNK_BYTES)
            if not chunk:
                return
            quiet = 0
            yield chunk
            continue
        quiet += 1
        if quiet == QUIET_POLLS:
            yield b""
        if not until_eof and process.poll() is not None:
            os.set_blocking(source, False)
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(source, CHUNK_BYTES):  # what is left in the pipe
                    yield chunk
            return


def run_redacted(
    spec: dict[str, object], output: str, command: list[str], until_eof: bool = False
) -> int:
    """Run the command with its stdout and stderr written, redacted, to `output`; its exit
    code (128 + the signal when a signal ended it)."""
    redactor = from_spec(spec)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    with open(output, "wb") as sink:
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as error:
            sink.write(f"{command[0]}: {error.strerror}\n".encode())
            return 127
        assert process.stdout is not None
        for chunk in _chunks(process.stdout.fileno(), process, until_eof):
            sink.write(redactor.feed(chunk) if chunk else redactor.flush_lines())
            sink.flush()  # what is read back while it runs is already redacted
        sink.write(redactor.close())
        code = process.wait()
    return code if code >= 0 else 128 - code


def pack_spec(spec: dict[str, object]) -> str:
    """The spec as one short command-line argument (zlib, then base64: an argument is at
    most 128 KiB, and the pattern is repetitive)."""
    return base64.b64encode(zlib.compress(json.dumps(spec).encode(), 9)).decode()


def main(argv: list[str]) -> int:
    """`SPEC OUTPUT MODE COMMAND...`: SPEC is the redaction spec (`pack_spec`); MODE is `exit`
    (stop when the command ends) or `eof` (a background job: until its output closes)."""
    spec = json.loads(zlib.decompress(base64.b64decode(argv[0])))
    output, mode, command = argv[1], argv[2], argv[3:]
    return run_redacted(spec, output, command, until_eof=mode == "eof")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
