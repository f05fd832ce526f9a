"""Model backends: loading Hugging Face causal LMs (the SmolLM2 target, any HF folder, tiny test
models) and running them with one rollback-able KV cache per request."""
