"""graphcost: a learned cost model for ML compilers (TpuGraphs format)."""

__version__ = "0.1.0"
