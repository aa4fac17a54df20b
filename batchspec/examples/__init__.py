"""Decoders written from the paper's description alone, with no ``batchspec`` import:
what ``batchspec.invariants.watch`` checks in tutorial 9 and the tests."""
