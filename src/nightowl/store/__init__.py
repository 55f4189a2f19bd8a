"""The app database: tables, migrations and the repositories that read and write them."""
