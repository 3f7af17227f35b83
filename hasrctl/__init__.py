"""hasrctl: the command line of hasr (transcribe, status, load/unload/stop, doctor, setup, eval)."""
