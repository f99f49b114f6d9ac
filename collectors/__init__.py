"""Collectors: wrap training steps in torch.profiler across runs (issue 4; not built yet).

torch is imported lazily here so that the pipeline never needs it.
"""
