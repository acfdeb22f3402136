"""Pure text functions shared by readers, ops, tokenizer and LM code (no I/O, no Ray)."""
