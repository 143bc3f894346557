"""Building blocks every family shares: fixed-point encoding and modular arithmetic, exact noise
samplers, secure aggregation, seeding, and report authentication. No protocol logic lives here."""
