"""The application layer: the `autoswitch` command line, the playground and the status view. It wires
the libraries together; no library module imports it."""
