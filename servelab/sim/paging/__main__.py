from servelab.sim.paging.compare import main

main()
