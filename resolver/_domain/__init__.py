"""The distributed-training vocabulary that has to be Python: the flags, the resolved config, the
functions the rules call, and the built-in rule table assembled from them (the rules themselves
are data, in ``rules/``)."""
