"""`python -m testbed.benchmarks [AREA ...]`."""

from testbed.benchmarks import main

raise SystemExit(main())
