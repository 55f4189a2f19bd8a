"""The agent's computer: sandbox backends, snapshots, browser and desktop."""
