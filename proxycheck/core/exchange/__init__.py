"""One exchange, request to last byte: its outcome and the observation a run keeps of it.

`outcomes` names what can happen to an exchange and holds every rule that decides it, for the
client's own exchanges and for recorded ones alike; `machine` is one live exchange as a sans-IO
state machine (timed events in; the watchdog to arm, the running analysis and, at the end, the
outcome and the `Observation` out), which `proxycheck.io.observe` drives from the network;
`watchdogs` are the timeouts it arms; `observation` is the record of one observed exchange that runs store and the differ reads;
`socks` words a SOCKS5 proxy's refusal of a connection, the same for both client stacks.
"""
