"""The crash campaign in the suite: about 20 SIGKILLs per database (`make crash` runs 200).

NIGHTOWL_CRASH_KILLS sets the number of kills and NIGHTOWL_CRASH_SEED replays a schedule; a
failure prints its seed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.crash_campaign import run_campaign

pytestmark = pytest.mark.slow


@pytest.mark.timeout(3600)
def test_crash_campaign_loses_and_doubles_nothing(tmp_path: Path, backend_url: str) -> None:
    kills = int(os.environ.get("NIGHTOWL_CRASH_KILLS", "20"))
    seed = os.environ.get("NIGHTOWL_CRASH_SEED")
    result = run_campaign(tmp_path, backend_url, kills=kills, seed=int(seed) if seed else None)
    print(json.dumps(result.__dict__))
    assert result.problems == [], f"seed {result.seed}: {result.problems}"
