"""Sans-I/O protocol code: numpy in, numpy out; no asyncio, no MQTT."""
