"""`python -m mt` runs the CLI (also the entry point for `torchrun -m mt train ...`)."""

from mt.cli import main

if __name__ == "__main__":
    main()
