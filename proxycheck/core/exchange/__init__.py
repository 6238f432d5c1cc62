"""One exchange, request to last byte: its outcome and the observation a run keeps of it.

`outcomes` names what can happen to an exchange and holds the rules that decide it; `observation`
is the record of one observed exchange that runs store and the differ reads.
"""
