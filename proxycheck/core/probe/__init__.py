"""Probes, pure: the searches `proxycheck probe` runs and the requests they send (`searches`),
and what each probe found on each route, whose limit it is (`findings`).
"""
