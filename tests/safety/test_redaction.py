"""Redaction finds a secret in the forms tools echo it, in text, in a stream cut anywhere,
and in a command's output as the filter program writes it."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from nightowl.safety import stream_filter
from nightowl.safety.redaction import Redactor

VALUE = 'k"ey\\Zq9/é+ü x'  # quotes, backslash, slash, non-ASCII, a plus and a space
TOKEN = "ghp_canary_5f0c2d9e8b7a"


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def _mixed_hex(text: str) -> str:
    return re.sub(r"%([0-9A-F])([0-9A-F])", lambda m: f"%{m[1]}{m[2].lower()}", text)


FORMS: dict[str, Callable[[str], str]] = {
    "as is": lambda v: v,
    "json-escaped": lambda v: json.dumps(v)[1:-1],
    "json-escaped, unicode kept": lambda v: json.dumps(v, ensure_ascii=False)[1:-1],
    "json-escaped slashes": lambda v: json.dumps(v)[1:-1].replace("/", "\\/"),
    "json in json": lambda v: json.dumps(json.dumps(v))[1:-1],
    "json in json in json": lambda v: json.dumps(json.dumps(json.dumps(v)))[1:-1],
    "percent-encoded": lambda v: quote(v, safe=""),
    "percent-encoded, lower case": lambda v: _lower_hex(quote(v, safe="")),
    "percent-encoded, mixed case": lambda v: _mixed_hex(quote(v, safe="")),
    "form-encoded": quote_plus,
    "partly percent-encoded": lambda v: quote(v, safe="/+"),
    "hex": lambda v: v.encode().hex(),
    "hex, upper case": lambda v: v.encode().hex().upper(),
    "base64": lambda v: base64.b64encode(v.encode()).decode(),
    "basic auth of user:secret": lambda v: base64.b64encode(b"user:" + v.encode()).decode(),
    "basic auth of :secret": lambda v: base64.b64encode(b":" + v.encode()).decode(),
    "basic auth of a longer user": lambda v: base64.b64encode(b"alice:" + v.encode()).decode(),
    "url-safe base64": lambda v: base64.urlsafe_b64encode(b"me:" + v.encode()).decode(),
}


@pytest.mark.parametrize("value", [VALUE, TOKEN])
@pytest.mark.parametrize("form", list(FORMS))
def test_every_common_form_of_a_secret_is_redacted(value: str, form: str) -> None:
    encoded = FORMS[form](value)
    text = f'Authorization: Basic {encoded}\n{{"echo": "{encoded}"}}'
    redacted = Redactor({"K": value}).redact(text)
    assert encoded not in redacted and redacted.count("[secret:K]") == 2
    # What is left of the form carries no more than the bits next to it (padding, a prefix).
    leftovers = re.sub(r"\[secret:K\]", " ", redacted)
    assert not any(len(part) > 8 and part in encoded for part in re.split(r"[\s\"{}:]", leftovers))


def test_ordinary_data_is_left_alone_and_values_too_short_are_not_redacted() -> None:
    redactor = Redactor({"K": VALUE, "T": TOKEN, "PIN": "123"})
    rng = random.Random(7)
    noise = base64.b64encode(rng.randbytes(300_000)).decode() + rng.randbytes(50_000).hex()
    assert redactor.redact(noise) == noise
    assert redactor.redact("PIN 123 and the token " + TOKEN) == "PIN 123 and the token [secret:T]"
    assert Redactor({}).redact(TOKEN) == TOKEN and not Redactor({"PIN": "123"})


def test_a_stream_cut_at_any_point_is_redacted_like_the_whole() -> None:
    redactor = Redactor({"K": VALUE, "T": TOKEN})
    forms = [FORMS[f](v).encode() for f in FORMS for v in (VALUE, TOKEN)]
    data = b"".join(b"x" * n + form for n, form in enumerate(forms)) * 3
    whole = redactor.redact_bytes(data)
    for size in (1, 7, 64, 1000):
        stream = redactor.stream()
        out = b"".join(stream.feed(data[i : i + size]) for i in range(0, len(data), size))
        assert out + stream.close() == whole
    assert whole.count(b"[secret:") == len(forms) * 3


def _filter(tmp_path: Path, command: str, mode: str = "exit") -> tuple[int, str]:
    spec = stream_filter.pack_spec(Redactor({"K": VALUE, "T": TOKEN}).spec().to_dict())
    output = tmp_path / "out" / "run.log"
    source = Path(stream_filter.__file__).read_text()
    process = subprocess.Popen(
        [sys.executable, "-I", "-c", source, spec, str(output), mode, "/bin/sh", "-c", command],
        env={"K": VALUE, "T": TOKEN, "PATH": os.environ["PATH"]},
        start_new_session=True,  # what the command leaves running is killed below
    )
    try:
        code = process.wait(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    return code, output.read_text()


def test_the_filter_writes_a_commands_output_redacted_and_keeps_its_exit_code(
    tmp_path: Path,
) -> None:
    command = (
        'printf "%s\\n" "$K"; printf "user:%s" "$T" | base64; printf ":%s" "$K" | base64; '
        'printf %s "$T" | od -An -tx1 | tr -d \' \\n\'; echo; echo "$T" >&2; exit 7'
    )
    code, written = _filter(tmp_path, command)
    assert code == 7
    assert VALUE not in written and TOKEN not in written
    assert written.count("[secret:K]") == 2 and written.count("[secret:T]") == 3


def test_the_filter_does_not_wait_for_what_a_command_left_running(tmp_path: Path) -> None:
    # A child that runs for an hour: waiting for it would hit the 60 s timeout of `_filter`.
    code, written = _filter(tmp_path, 'echo "$T"; sleep 3600 & echo done')
    assert code == 0 and written == "[secret:T]\ndone\n"
