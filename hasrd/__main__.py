from hasrd.server import main

raise SystemExit(main())
