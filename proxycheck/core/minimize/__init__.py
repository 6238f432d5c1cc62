"""Minimizing a failing recording: the search over exchanges and sessions (`ddmin`) and shrinking
one request body (`shrink`).
"""
