"""`python -m bench.connections`."""

from bench.connections.cli import main

if __name__ == "__main__":
    main()
