"""Secret redaction: throughput of the one-regex redactor (every common form of every secret)
on base64 text, prose and binary data, for 1 and 12 secrets; and, beside it, a plain
`bytes.replace` of the raw values on the same data, measured in the same run. The ratio (how
many plain replaces one full redaction costs) is the figure that survives a noisy machine.
Prints one JSON object.
"""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Callable

from nightowl.safety.redaction import Redactor

SIZE = 4 * 1024 * 1024
ROUNDS = 3


def _best(work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def _replace_all(blob: bytes, values: list[bytes]) -> bytes:
    for value in values:
        blob = blob.replace(value, b"[secret]")
    return blob


def main() -> None:
    rng = random.Random(17)
    data = {
        "base64": base64.b64encode(rng.randbytes(SIZE * 3 // 4)),
        "prose": (b"the quick brown fox jumps over the lazy dog; " * (SIZE // 45))[:SIZE],
        "binary": rng.randbytes(SIZE),
    }
    report: dict[str, object] = {"megabytes": SIZE / 1024 / 1024}
    for count in (1, 12):
        secrets = {f"S{i}": base64.b32encode(rng.randbytes(15)).decode() for i in range(count)}
        redactor = Redactor(secrets)
        raw = [v.encode() for v in secrets.values()]
        for kind, blob in data.items():
            full = _best(lambda: redactor.redact_bytes(blob))  # noqa: B023 (called at once)
            plain = _best(lambda: _replace_all(blob, raw))  # noqa: B023
            report[f"{count}_secrets_{kind}_mb_per_s"] = round(SIZE / 1024 / 1024 / full, 1)
            report[f"{count}_secrets_{kind}_ratio_to_replace"] = round(full / plain, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
