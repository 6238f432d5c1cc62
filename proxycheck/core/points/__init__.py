"""The same traffic seen at several points of the chain: each recorder is a *point*; `seen` says
what one point saw of one exchange, `matching` finds the same exchange at two points (by what the
model sees, then order and time, the clocks' offset estimated from the exchanges themselves),
`trace` follows every exchange inward and says where a failure was last seen progressing, and
`watching` does the same for recordings still being written.
"""
