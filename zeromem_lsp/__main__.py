"""`python -m zeromem_lsp` runs the `zeromem` command."""

from zeromem_lsp.cli import main

raise SystemExit(main())
