"""The starter set of eval cases, shipped with nightowl (one JSON file per scenario)."""

from pathlib import Path

STARTER_DIR = Path(__file__).parent
