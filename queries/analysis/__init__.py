"""Analysis built on the SQL queries: models and derived tables that need more than one query.

Modules here take a ``Database`` (from ``scaletrace.pipeline.store.db``) as an argument but never import
``scaletrace.pipeline`` at run time (only under ``TYPE_CHECKING``), so the layer stays below the pipeline.
"""
