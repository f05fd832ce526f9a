"""HedgeSpec: speculative decoding with a pool of drafters chosen online (no Ray import here)."""
