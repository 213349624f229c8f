"""The machine as resolution sees it: :class:`~resolver._snapshot.environment.Environment` (facts,
variables, files) and the probes that read each fact."""
