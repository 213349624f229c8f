"""How rank processes are watched, for the launchers, ``resolver run`` and ``resolver check`` alike: the rank
group that starts and reaps them, the supervisor that blames the first failure, the rank run in the
launching process, clean-up, signals and the room for more processes."""
