"""The local stack: emulator processes, the Cloud Tasks emulator, topology."""
