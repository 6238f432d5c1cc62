"""The testbed proxycheck checks itself on: what the reference engine answers (`synth`) and the
bytes it sends (`wire`), answers taken from a recording (`recorded_answers`), the engine's faults
(`faultspec`), the Responses API's stored answers and WebSocket mode (`response_store`,
`responses_socket`), what a fault-injecting hop forwards (`ssefilter`) and when it closes a
socket (`socketfaults`), and the synthetic agent's conversation (`conversation`).
"""
