"""`python -m graphcost …` (and `torchrun … -m graphcost …`): the `graphcost` command."""

from graphcost.cli import main

if __name__ == "__main__":  # not when a spawned worker re-imports the parent's main module
    main(prog_name="graphcost")
