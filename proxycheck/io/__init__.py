"""Input and output around the pure core: recordings on disk (and the replayer, engine and hop control)."""
