"""vLLM stand-in: `TokensPrompt` (a dict of token ids)."""

TokensPrompt = dict
