"""Every program in examples/ run as a user runs it, against the real emulators and Redis."""
