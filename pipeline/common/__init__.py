"""What every stage of the pipeline uses: one-line errors, size and memory limits, Ctrl-C, the SQL sandbox.

Imports nothing else of the pipeline."""
