"""asyncio services that move the protocol's messages over MQTT: one module per party."""
