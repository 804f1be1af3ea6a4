"""`python -m infra.capacity`: see `infra.capacity.cli`."""

from infra.capacity.cli import main

raise SystemExit(main())
