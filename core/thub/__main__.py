"""``python -m thub``: the same as the ``thub`` command."""

from thub.cli.main import main

main()
