"""What several tests share that is not a fixture: synthetic language data (`langdata`), tiny
transformers Marian directories built from it (`hfdirs`), and how a cost grows with its input
(`scaling`: linear time shown by two sizes in one run, never by a deadline). Imported as
`tests.support.x` (pytest's `pythonpath = ["."]` in pyproject.toml puts the repository root on the
path; no test edits sys.path)."""
