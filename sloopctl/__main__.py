"""``python -m sloopctl``: the same entry point as the ``sloopctl`` script."""

from sloopctl.cli import main

if __name__ == "__main__":
    main()
