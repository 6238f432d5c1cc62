"""Replay, decided before a byte is sent: the chain file and its routes (`chain`), the plan of
what each route is sent and when (`plan`), greedy decoding (`greedy`), and telling a missing
credential from a fault (`credentials`).
"""
