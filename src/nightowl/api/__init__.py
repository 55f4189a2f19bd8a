"""HTTP routes and change notifications."""
