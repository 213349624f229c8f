"""What a launcher and the ranks it starts share (the bottom of the runtime): the variables that
tell a rank which one it is and carry its config, the rank files it reports through, the entry
checks of a launched rank, rendezvous ports and the collector pause. Imports nothing of the
runtime above :mod:`runtime.errors`."""
