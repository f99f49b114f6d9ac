"""Reading traces and their side files into columns: decode the JSON, extract the events, classify
kernels and collectives, read run.json and the step / power logs.

No database here: what this layer returns is Arrow tables and plain values."""
