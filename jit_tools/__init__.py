"""Tools around jit_loader: command line (cli), Jupyter integration (notebook), checks (check)."""
