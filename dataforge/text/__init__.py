"""Pure text functions: cleaning, surrogate repair, normalization, CJK helpers, statistics.

The lowest layer above the standard library, numpy and pyarrow: modules here import no
other dataforge package (no ops, io, runtime), so readers, ops, the tokenizer and the LM
code can all share them. Ops wrap these functions in their batch protocol.
"""

__all__: list[str] = []
