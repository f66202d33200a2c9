"""JAX programs as graphs (and later, measured): needs the optional extra `graphcost[xla]`.

Importing this package does not import JAX; the functions that need it import it.
"""
