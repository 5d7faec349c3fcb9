"""Custom checkov policies of the pubsub-toolkit module (checkov loads every module here)."""
