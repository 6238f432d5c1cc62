"""Recordings: the format the recorder journals (`journal`), request bodies as content-addressed
pieces (`bodies`), redaction (`redact`), what the recorder tees (`capture`), which exchanges are
turns of one conversation (`sessions`) and the sessions as a user reads them (`summary`).
"""
