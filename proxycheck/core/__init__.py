"""The pure core: bytes and times in, events, results and sessions out.

Nothing in this package does I/O, reads a clock, or imports httpx, aiohttp, mitmproxy or rich
(tests/core/test_purity.py checks the imports). Time is always passed in.
"""
