"""graphcost: a learned cost model for ML compilers (TpuGraphs format)."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`graphcost.autotune` on first use, so `import graphcost` stays light (no JAX/torch)."""
    if name == "autotune":
        import importlib

        return importlib.import_module("graphcost.autotune")
    raise AttributeError(f"module 'graphcost' has no attribute {name!r}")
