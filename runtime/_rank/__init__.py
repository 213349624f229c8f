"""Inside a launched process (the top of the runtime, below :mod:`runtime.launch`): what a rank
does when its script reaches ``runtime.launch`` (:mod:`runtime._rank.worker`), and the entry of a
``resolver run`` rank, run by path (:mod:`runtime._rank.main`)."""
