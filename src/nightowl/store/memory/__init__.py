"""Memory's storage: the queries over memory's tables (store/memory_tables.py), one module per
kind of item. The rules (bounds, validation, who may write what) are memory/'s."""
