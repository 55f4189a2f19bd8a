"""Backup and restore of a whole nightowl: the stores, the blob store and the keys, in one file.

`manifest.py` says what an archive holds, `databases.py` copies the two stores (SQLite's
online backup API, or `pg_dump`/`pg_restore`), `create.py` writes an archive, `restore.py`
checks one and puts it back, `commands.py` is the `nightowl backup | restore` command line.
"""
