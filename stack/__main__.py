"""``python -m stack up|down|status [--dir .stack] [--no-airflow]``: what ``make stack|stack-down|stack-status`` run."""

import sys

from stack.services import main

sys.exit(main())
