"""``python -m tkjit``: the same as the ``tkjit`` command."""
from .cli import main

raise SystemExit(main())
