"""``batchspec bench``: throughput of every method against transformers' own
decoding, measured side by side in one run, with the ideal speedup the
measured forward costs allow (see ``docs/benchmarks.md``)."""
