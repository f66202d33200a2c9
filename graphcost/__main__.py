from graphcost.cli import main

main()
