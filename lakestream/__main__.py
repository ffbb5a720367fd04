"""``python -m lakestream``: the `lakestream` command."""

from lakestream.cli import app

if __name__ == "__main__":
    app(prog_name="lakestream")
