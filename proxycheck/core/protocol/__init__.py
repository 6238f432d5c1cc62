"""The protocol: how LLM traffic is framed and read, whatever carried it.

Server-Sent Events (`sse`), content codings (`encoding`), the API dialects (`dialects`: OpenAI
chat/completions/responses, Anthropic messages, SGLang generate), one response read as the client
saw it (`analysis`, into a `result`), what the model sees in a request (`requestparts`) and what
HTTP allows in a header (`httpsyntax`). Everything above reads the wire through this package.
"""
