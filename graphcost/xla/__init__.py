"""JAX programs as graphs, their config spaces, and their measurement on this machine:
needs the optional extra `graphcost[xla]`.

Importing this package does not import JAX; the functions that need it import it.
"""
