"""How the launchers watch the rank processes they start: the rank group, the processes, the
supervisor that blames the first failure, clean-up, signals, restarts and each rank's output."""
