"""`python -m bench.preprocess`."""

from bench.preprocess.cli import main

if __name__ == "__main__":
    main()
